"""A Markdown table from Google Benchmark JSON files (`--benchmark_format=json --benchmark_out=FILE`), for
the generated tables of docs/performance.md (retro_bench.doc_tables):

    python -m retro_bench.tools.gbench_table FILE.json [FILE.json ...] --header 'keys|ours|FAISS|ratio'
        --row '32768,0=32K' --row '131072,0=128K' ...
        --col '[s BM_WaveKMeans/$1/$2:.2f] s' --col '[s BM_FaissKMeans/$1/$2:.2f] s'
        --col '[s BM_FaissKMeans/$1/$2 / s BM_WaveKMeans/$1/$2:.1f]x'

A row is KEYS=LABELS: its label cells (split at '|') come first, then one cell per --col, whose template
has $1, $2, ... replaced by the row's comma-separated KEYS. A placeholder [FIELD NAME:FORMAT] is the median
over the repetitions of the benchmark NAME (a run name, or its prefix up to a '/': `BM_X/4096` names
`BM_X/4096/min_time:1.000`) of FIELD: s, ms, us (real time), cpu_s, cpu_ms, cpu_us (CPU time), GB/s
(bytes_per_second / 1e9) or counter.NAME (a user counter); [A / B:FORMAT] is the ratio of two medians
(B may be a number: [cpu_ms X / 1000:.2f]).
FORMAT (required) is Python's (`.2f`, `,.0f`). A cell with a benchmark or counter no file has is '—'. Medians come from the
repetitions' own rows (Google Benchmark's 'median' aggregate where only aggregates were written); the
line under the table gives the repetition counts and the files. Standard library only."""

import argparse
import json
import re
import statistics
import sys

UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
TIME = {"s": 1.0, "ms": 1e3, "us": 1e6}
PLACEHOLDER = re.compile(r"\[([^\[\]]+)\]")


class TableError(Exception):
    pass


class Runs:
    """The benchmarks of the files: run name -> list of result rows (one per repetition)."""

    def __init__(self, paths):
        self.paths, self.reps, self.aggs = paths, {}, {}
        for path in paths:
            with open(path, encoding="utf-8") as f:
                for b in json.load(f)["benchmarks"]:
                    name = b.get("run_name", b["name"])
                    if b.get("run_type") == "aggregate":
                        if b.get("aggregate_name") == "median":
                            self.aggs.setdefault(name, []).append(b)
                    else:
                        self.reps.setdefault(name, []).append(b)
        self.used = {}

    def find(self, name):
        names = [n for n in {*self.reps, *self.aggs} if n == name or n.startswith(name + "/")]
        if len(names) > 1:
            raise TableError(f"'{name}' names {len(names)} benchmarks: {', '.join(sorted(names))}")
        return names[0] if names else None

    def value(self, field, name):
        full = self.find(name)
        if full is None:
            return None
        rows = self.reps.get(full) or self.aggs[full]
        self.used[full] = len(rows) if full in self.reps else int(rows[0].get("repetitions", 1))
        vals = [_field(b, field) for b in rows]
        return None if None in vals else statistics.median(vals)

    def footer(self):
        reps = "/".join(str(c) for c in sorted(set(self.used.values())))
        what = "medians of " + (f"{reps} repetitions" if reps != "1" else "one run (no repetitions)")
        return f"({what}; {', '.join(self.paths)})"


def _field(b, field):
    if field in TIME or field.startswith("cpu_"):
        unit = field[4:] if field.startswith("cpu_") else field
        t = b["cpu_time" if field.startswith("cpu_") else "real_time"] * UNIT[b["time_unit"]]
        return t * TIME[unit]
    if field == "GB/s":
        return b["bytes_per_second"] / 1e9
    if field.startswith("counter."):
        v = b.get(field[len("counter."):])
        return None if v is None else float(v)
    raise TableError(f"unknown field '{field}' (s, ms, us, cpu_s, cpu_ms, cpu_us, GB/s, counter.NAME)")


def _term(runs, text):
    try:
        return float(text)  # a constant: [ms X / 1000:.2f]
    except ValueError:
        pass
    parts = text.split(None, 1)
    if len(parts) != 2:
        raise TableError(f"'{text}': a term is FIELD NAME")
    return runs.value(parts[0], parts[1].strip())


def cell(runs, template):
    """The template with every placeholder filled; '—' when a benchmark is missing."""
    out, pos = [], 0
    for m in PLACEHOLDER.finditer(template):
        expr, sep, fmt = m.group(1).rpartition(":")
        if not sep:
            raise TableError(f"'[{m.group(1)}]': a placeholder ends with :FORMAT")
        terms = [_term(runs, t) for t in expr.split(" / ")]
        if any(v is None for v in terms):
            return "—"
        if len(terms) == 2:
            v = terms[0] / terms[1]
        elif len(terms) == 1:
            v = terms[0]
        else:
            raise TableError(f"'{m.group(1)}': at most one ' / '")
        out += [template[pos:m.start()], format(v, fmt)]
        pos = m.end()
    out.append(template[pos:])
    return "".join(out)


def table(runs, header, rows, cols):
    """The Markdown table; runs: a source with value(field, name) -> float or None, and footer()."""
    head = header.split("|")
    lines = ["| " + " | ".join(h.strip() for h in head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        keys, sep, labels = row.partition("=")
        if not sep:
            raise TableError(f"--row '{row}': KEYS=LABELS")
        subst = {f"${i}": k.strip() for i, k in enumerate(keys.split(","), 1)}
        cells = [c.strip() for c in labels.split("|")]
        for t in cols:
            for k in sorted(subst, reverse=True):  # $10 before $1
                t = t.replace(k, subst[k])
            cells.append(cell(runs, t))
        if len(cells) != len(head):
            raise TableError(f"--row '{row}': {len(cells)} cells under {len(head)} headers")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", runs.footer()]
    return "\n".join(lines) + "\n"


def cli(argv, name, doc, source, inputs_help, placeholder):
    """The command line both table tools share: inputs, --header, --row, --col; source(inputs) reads them."""
    ap = argparse.ArgumentParser(prog=f"python -m retro_bench.tools.{name}", description=doc.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", help=inputs_help)
    ap.add_argument("--header", required=True, help="column headers separated by '|'")
    ap.add_argument("--row", action="append", default=[], help="KEYS=LABELS (keys fill $1, $2, ...)")
    ap.add_argument("--col", action="append", default=[], help=f"a cell template with {placeholder} placeholders")
    a = ap.parse_args(argv)
    try:
        sys.stdout.write(table(source(a.inputs), a.header, a.row, a.col))
    except (TableError, OSError, KeyError, ValueError, IndexError) as e:
        print(f"{name}: error: {e!r}", file=sys.stderr)
        return 2
    return 0


def main(argv=None):
    return cli(argv, "gbench_table", __doc__, Runs, "Google Benchmark JSON outputs", "[FIELD NAME:FORMAT]")


if __name__ == "__main__":
    sys.exit(main())
