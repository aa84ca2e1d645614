"""The accuracy beside the speed of a GPU run (Figure 12's table, issue 41 #4): for each method of a cuda results
directory, per context, the harness's metrics of its selections on the run's trace — recall@100, attention
mass, output error — from its batch-1 records (the selections do not depend on the batch; the GPU runs
evaluate every selected step). The closed loop's task accuracy at the same budgets is docs/closed-loop.md's
(configs/gpu/every-method.json takes the 32K grid's middle budget).

    PYTHONPATH=python python3 -m retro_bench.gpu.accuracy_table RESULTS_DIR [RESULTS_DIR ...]

RESULTS_DIR: a results directory of `retro-bench run` with "backend": "cuda" (its runs.jsonl). Prints Markdown.
"""
import argparse
import json
import os
import sys

from retro_bench.gpu.summary_table import ctx_name, record_method

METRICS = (("recall@100", "recall@100", "{:.3f}"), ("mass", "mass", "{:.3f}"), ("out_err", "out_err", "{:.4f}"))


def row_name(r):
    """The method's row as the summary table names it (full's kernel, wave's KV placement) and its parameters."""
    params = ", ".join(f"{k} {v}" for k, v in sorted(r.get("params", {}).items()) if k in ("k", "retrieval", "estimation", "K", "L"))
    return record_method(r), params


def rows_of(dirs):
    """{(context, method, params): record} of the batch-1 records (else each method's smallest batch)."""
    best = {}
    for d in dirs:
        with open(os.path.join(d, "runs.jsonl")) as f:
            for line in f:
                if not line.strip():
                    continue
                r = json.loads(line)
                if r.get("backend") != "cuda":
                    continue
                key = (r["prompt_len"],) + row_name(r)
                if key not in best or r["batch"] < best[key]["batch"]:
                    best[key] = r
    return best


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    a = ap.parse_args(argv)
    rows = rows_of(a.results)
    head = ["context", "method", "budget"] + [h for h, _, _ in METRICS] + ["batch of the record"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for (n, method, params), r in sorted(rows.items()):
        m = r["metrics"]
        cells = [ctx_name(n), method, params or "-"]
        for _, key, fmt in METRICS:
            v = m.get(key, {}).get("mean")
            cells.append(fmt.format(v) if v is not None else "-")
        cells.append(str(r["batch"]))
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
