"""The accuracy beside the speed of a GPU run (Figure 12's table, issue 41 #4): for each method of a cuda results
directory, per context, the harness's metrics of its selections on the run's trace — recall@100, attention
mass, output error — from its batch-1 records (the selections do not depend on the batch; the GPU runs
evaluate every selected step) — and, with --closed-loop, the task accuracy of the same method at the same
budget inside a model's decode (docs/closed-loop.md; configs/gpu/every-method.json takes the 32K grid's middle
budget): over all NIAH cases and on the cases full attention answers, with the closed-loop run's exact-token
share beside it so that the match can be read. A row's closed-loop run is the method's (full attention's is
the reference) whose non-budget parameters (wave's estimation, MagicPIG's K and L) equal the record's where
both have them and whose exact-token share is nearest the record's (ratio on a log scale; the GPU traces are
another model at other contexts, so the share of the context attended is what carries over).

    PYTHONPATH=python python3 -m retro_bench.gpu.accuracy_table RESULTS_DIR [RESULTS_DIR ...] [--closed-loop DIR]

RESULTS_DIR: a results directory of `retro-bench run` with "backend": "cuda" (its runs.jsonl). DIR: a closed-loop
results directory with its runs.jsonl (results/closedloop-qwen2.5-0.5b-32k is committed). Prints Markdown.
"""
import argparse
import math
import sys

from retro_bench.gpu.summary_table import ctx_name, record_method
from retro_bench.runs_file import read_runs

METRICS = (("recall@100", "recall@100", "{:.3f}"), ("mass", "mass", "{:.3f}"), ("out_err", "out_err", "{:.4f}"))


def row_name(r):
    """The method's row as the summary table names it (full's kernel, wave's KV placement) and its parameters."""
    params = ", ".join(f"{k} {v}" for k, v in sorted(r.get("params", {}).items()) if k in ("k", "retrieval", "estimation", "K", "L"))
    return record_method(r), params


def rows_of(dirs):
    """{(context, method, params): record} of the batch-1 records (else each method's smallest batch)."""
    best = {}
    for r in (r for d in dirs for r in read_runs(d) if r.get("backend") == "cuda"):
        key = (r["prompt_len"],) + row_name(r)
        if key not in best or r["batch"] < best[key]["batch"]:
            best[key] = r
    return best


# parameters that are not the budget: a closed-loop run must have the record's value where both have one
SAME_PARAMS = ("estimation", "K", "L")


def closed_loop_match(record, closed):
    """The closed-loop run (runs.jsonl record) standing for a GPU record: see the module's doc. None if the
    method has no run there."""
    method = "reference" if record["method"] == "full" else record["method"]
    params = record.get("params", {})
    cands = [c for c in closed if c["method"] == method and (c.get("task") or {}).get("niah_cases")
             and all(c["params"][k] == params[k] for k in SAME_PARAMS if k in params and k in c.get("params", {}))]
    frac = (record["metrics"].get("exact_frac") or {}).get("mean")
    if not cands or (method != "reference" and not frac):
        return None
    return min(cands, key=lambda c: abs(math.log((c.get("exact_frac") or 1.0) / (frac or 1.0))))


def pct(v):
    return f"{100 * v:.1f}" if v is not None else "-"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    ap.add_argument("--closed-loop", metavar="DIR", help="a closed-loop results directory (runs.jsonl): its NIAH "
                    "accuracy at the nearest budget beside each row")
    a = ap.parse_args(argv)
    rows = rows_of(a.results)
    closed = read_runs(a.closed_loop) if a.closed_loop else None
    head = ["context", "method", "budget"] + [h for h, _, _ in METRICS] + ["batch of the record"]
    if closed is not None:
        head += ["closed loop: exact %", "NIAH acc %", "acc on full's correct %"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for (n, method, params), r in sorted(rows.items()):
        m = r["metrics"]
        cells = [ctx_name(n), method, params or "-"]
        for _, key, fmt in METRICS:
            v = m.get(key, {}).get("mean")
            cells.append(fmt.format(v) if v is not None else "-")
        cells.append(str(r["batch"]))
        if closed is not None:
            c = closed_loop_match(r, closed)
            t = (c or {}).get("task") or {}
            cells += [pct(c.get("exact_frac", 1.0)) if c else "-", pct(t.get("accuracy")),
                      pct(t.get("accuracy_on_full_correct"))]
        print("| " + " | ".join(cells) + " |")
    if closed is not None:
        ref = next((c for c in closed if c["method"] == "reference"), {})
        t = ref.get("task") or {}
        print(f"\nclosed loop: {ref.get('model', '?')}, {a.closed_loop} — {t.get('niah_cases', '?')} NIAH cases, full "
              f"attention answers {t.get('full_correct_cases', '?')}; each row's run: the same method at the nearest "
              "exact-token share (wave's estimation, MagicPIG's K and L equal)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
