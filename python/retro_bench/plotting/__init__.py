"""retro_bench.plotting: figures and the HTML report for retro-bench result directories (docs/plots.md).

Modules:
  results  - loading a results directory (manifest.json, runs.jsonl, per_head.csv, parts/, extra JSON)
  figures  - the figure registry: for each figure, applies(results) -> bool, data(results) -> series,
             draw(series, fig); data extraction is pure Python (no matplotlib) so tests check it directly
  style    - one colour and marker per method, metric labels and units, paper rcParams
  report   - the self-contained HTML report
  cli      - `python -m retro_bench.plotting plot|report|list`
"""
