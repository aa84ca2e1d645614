"""A Markdown table from `retro-bench run` results (runs.jsonl and manifest.json), for the generated tables
of docs/performance.md (retro_bench.doc_tables); the table is laid out as by retro_bench.tools.gbench_table:

    python -m retro_bench.tools.runs_table ROOT [ROOT ...] --header 'method|select_us p50'
        --row 'streaming=StreamingLLM' --col '[select_us.p50 python-methods/$1:.1f] us'

Each ROOT is a results root (`--results ROOT`) holding results directories; several ROOTs are repetitions
of the same runs. A placeholder [FIELD DIR/SELECTOR:FORMAT] is the median over the ROOTs of FIELD of the
one record of ROOT/DIR/runs.jsonl that SELECTOR picks: `method` or `method,param=value,...` (the record's
method and those of its params; values compared as printed in JSON). FIELD is `metric.stat` (e.g.
`select_us.p50`, `recall@100.mean`: the record's metrics). [FIELD DIR:FORMAT] with FIELD `wall_s` or
`peak_rss_bytes` reads ROOT/DIR/manifest.json's last session, summed over the directories a `*` in DIR
matches. `DIR@N` takes ROOT number N (from 1) alone instead of the median. [A / B:FORMAT] is a ratio
(B may be a number: [build_ms.p50 D/wave / 1000:.1f] for seconds);
FORMAT is Python's (`.2f`). A cell whose record or directory is missing is '—'. Standard library only."""

import fnmatch
import json
import os
import statistics
import sys

from ..runs_file import read_runs
from .gbench_table import TableError, cli

MANIFEST = ("wall_s", "peak_rss_bytes")


class Results:
    def __init__(self, roots):
        self.roots, self.cache, self.used, self.median = roots, {}, set(), False

    def _records(self, path):
        if path not in self.cache:
            self.cache[path] = read_runs(path)
        return self.cache[path]

    def _one(self, root, field, name):
        if field in MANIFEST:
            dirs = sorted(d for d in os.listdir(root) if fnmatch.fnmatchcase(d, name)) if os.path.isdir(root) else []
            vals = []
            for d in dirs:
                with open(os.path.join(root, d, "manifest.json"), encoding="utf-8") as f:
                    vals.append(float(json.load(f)["sessions"][-1][field]))
            return sum(vals) if vals else None
        d, _, selector = name.partition("/")
        path = os.path.join(root, d)
        if not os.path.isfile(os.path.join(path, "runs.jsonl")):
            return None
        method, *conds = selector.split(",")
        want = dict(c.split("=", 1) for c in conds)
        hits = [r for r in self._records(path) if r["method"] == method
                and all(k in r.get("params", {}) and _show(r["params"][k]) == v for k, v in want.items())]
        if len(hits) > 1:
            raise TableError(f"'{name}' picks {len(hits)} records in {path}: {', '.join(r['label'] for r in hits)}")
        if not hits:
            return None
        metric, _, stat = field.rpartition(".")
        return float(hits[0]["metrics"][metric][stat])

    def value(self, field, name):
        name, _, n = name.partition("@")
        roots = [self.roots[int(n) - 1]] if n else self.roots
        self.median |= not n and len(roots) > 1
        vals = [v for v in (self._one(r, field, name) for r in roots) if v is not None]
        self.used.update(roots)
        return statistics.median(vals) if vals else None

    def footer(self):
        roots = [r for r in self.roots if r in self.used]
        what = (f"medians over {len(roots)} repetitions" if self.median
                else f"{len(roots)} repetitions" if len(roots) > 1 else "one run")
        return f"({what}: {', '.join(roots)})"


def _show(v):
    return json.dumps(v) if not isinstance(v, str) else v


def main(argv=None):
    return cli(argv, "runs_table", __doc__, Results, "results roots (repetitions of the same runs)",
               "[FIELD DIR/SELECTOR:FORMAT]")


if __name__ == "__main__":
    sys.exit(main())
