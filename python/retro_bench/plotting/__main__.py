"""Figures and the HTML report for retro-bench results (docs/plots.md).

    python -m retro_bench.plotting plot   RESULTS_DIR [--out DIR] [--format png,pdf] [--only NAMES] [--inspect FILE]
    python -m retro_bench.plotting report RESULTS_DIR [--out FILE]
    python -m retro_bench.plotting list   RESULTS_DIR

Normally run through `retro-bench plot` / `retro-bench report`, with $RETRO_PYTHON or /usr/bin/python3
(Debian's python3-matplotlib; scripts/env.sh's RETRO_PYTHON).
"""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
