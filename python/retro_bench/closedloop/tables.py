#!/usr/bin/env python3
"""Markdown tables of a closed-loop results directory (docs/closed-loop.md):

    PYTHONPATH=python python3 -m retro_bench.closedloop.tables results/closedloop-smollm2-2k

fidelity (KL mean / p90, top-1, perplexity), NIAH accuracy (all cases, on full's correct cases) with
greedy agreement, time (median ms per decode step, all layers, next to the reference's) and, when
offline-online.json exists, the Spearman table."""

import json
import os
import sys

from ..runs_file import read_runs


def _f(v, fmt):
    return fmt.format(v) if v is not None else "–"


def short_label(r):
    keep = {"oracle_topk": ("k",), "streaming": ("sink", "window"), "quest": ("k",),
            "wave": ("retrieval", "estimation"), "faiss_flat": ("k",), "faiss_ivf": ("k",), "faiss_hnsw": ("k",),
            "retrieval_attention": ("k",), "ctkvr": ("rho_prime",), "magicpig": ("K", "L"), "pq": ("k",)}
    p = r.get("params", {})
    ks = keep.get(r["method"], tuple(sorted(p)))
    return r["method"] + " " + ",".join(f"{k}={p[k]}" for k in ks if k in p)


def main(path):
    recs = read_runs(path)
    ref = recs[0]
    rf, rt = ref.get("fidelity") or {}, ref.get("task") or {}
    print(f"Reference (full attention): perplexity {_f(rf.get('ppl'), '{:.2f}')} over {rf.get('tokens')} tokens; "
          + (f"NIAH accuracy {_f(rt.get('accuracy'), '{:.2f}')} ({rt.get('niah_cases')} cases); " if rt.get("niah_cases")
             else "no NIAH cases; ") +
          f"{_f(ref.get('step_ms_median'), '{:.0f}')} ms per decode step (median)\n")
    print("| run | exact_frac | est_frac | KL mean | KL p90 | top-1 | ppl | NIAH acc | acc on full-correct | agreement | ms/step | build s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in recs[1:]:
        f, t = r.get("fidelity") or {}, r.get("task") or {}
        print(f"| {short_label(r)}{'' if r.get('complete', True) else ' (partial)'} | {_f(r.get('exact_frac'), '{:.3f}')} | "
              f"{_f(r.get('est_frac'), '{:.3f}')} | {_f(f.get('kl_mean'), '{:.4f}')} | {_f(f.get('kl_p90'), '{:.4f}')} | "
              f"{_f(f.get('top1'), '{:.3f}')} | {_f(f.get('ppl'), '{:.2f}')} | {_f(t.get('accuracy'), '{:.2f}')} | "
              f"{_f(t.get('accuracy_on_full_correct'), '{:.2f}')} | {_f(t.get('agreement_mean'), '{:.1f}')} | "
              f"{_f(r.get('step_ms_median'), '{:.0f}')} | {_f(r.get('build_s_total'), '{:.0f}')} |")
    oo = os.path.join(path, "offline-online.json")
    if os.path.exists(oo):
        with open(oo) as f:
            obj = json.load(f)
        closed = []
        for t in obj["table"]:
            if t["closed"] not in closed:
                closed.append(t["closed"])
        print(f"\nSpearman rank correlation over (method, budget) points (n = {max(t['n'] for t in obj['table'])}):\n")
        print("| open-loop \\ closed-loop | " + " | ".join(closed) + " |")
        print("|---|" + "---|" * len(closed))
        for o in ("recall@100", "mass", "out_err"):
            row = {t["closed"]: t["spearman"] for t in obj["table"] if t["open"] == o}
            print(f"| {o} | " + " | ".join(_f(row.get(c), "{:+.2f}") for c in closed) + " |")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
