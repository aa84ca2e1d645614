"""Markdown views of a closed-loop results directory that docs/closed-loop.md shows as generated tables
(retro_bench.doc_tables), computed from the part files and offline-online.json alone:

    python -m retro_bench.closedloop.doc_views fidelity RESULTS_DIR CASE_ID
        one row per method setting, its budgets side by side (" / ", smallest first): exact %, KL(full ‖
        method) mean, top-1 agreement, perplexity over the case's teacher-forced positions
    python -m retro_bench.closedloop.doc_views costs RESULTS_DIR [KIND]
        what the part files recorded of time (KIND's cases, default niah): the prefills (from scratch, and
        reusing a kept prefix), each method's index build (fresh, and the copies budgets share) and its
        decode steps, as medians over the cases; seconds of the machine the parts ran on, as loaded as it was
    python -m retro_bench.closedloop.doc_views points RESULTS_DIR [BUDGET]
        offline-online.json's points nearest an exact-token share (default 0.05), one per method setting:
        the open-loop means beside the closed-loop outcomes
    python -m retro_bench.closedloop.doc_views steps RESULTS_DIR
        runs.jsonl's median wall ms per decode step of every run beside the reference's (full attention,
        measured in the same processes), and their ratio
    python -m retro_bench.closedloop.doc_views spearman RESULTS_DIR [CLOSED ...]
        offline-online.json's Spearman table: open-loop metric x closed-loop measure (default: every
        closed-loop measure the file has)

Numbers are means of the part files' per-position values (as claims and the runs' records compute them);
a run without a part for the case is left out, and the line above the table says how many runs it has."""

import argparse
import math
import os
import sys

import numpy as np

from ..runs_file import read_runs
from .claims import ClaimsError, _part, _read_json, load_dir
from .results import REFERENCE
from .tables import short_label

# the parameter that sets each method's budget; the others name the setting a row stands for
BUDGET = {"oracle_topk": ("k",), "streaming": ("window",), "quest": ("k",), "wave": ("retrieval",),
          "faiss_flat": ("k",), "faiss_ivf": ("k",), "faiss_hnsw": ("k",), "retrieval_attention": ("k",),
          "ctkvr": ("rho_prime",), "magicpig": ("K", "L"), "pq": ("k",)}
# the non-budget parameters worth a row of their own (wave's estimation zone); others are the config's
SETTING = {"wave": ("estimation",)}
CLOSED_NAMES = {"kl_mean": "KL mean", "top1": "top-1", "ppl": "ppl", "niah_accuracy": "NIAH accuracy",
                "agreement": "greedy agreement"}


def _ppl(nll):
    return math.exp(float(np.mean(nll)))


def _budget_label(method, params):
    keys = BUDGET.get(method, ())
    vals = [params[k] for k in keys if k in params]
    return vals[0] if len(vals) == 1 else "(" + ", ".join(str(v) for v in vals) + ")"


def _setting(method, params):
    return tuple((k, params[k]) for k in SETTING.get(method, ()) if k in params)


def fidelity(path, case_id):
    d = load_dir(path)
    ref = _part(path, REFERENCE, case_id)
    if ref is None:
        raise ClaimsError(f"{path}: no reference part for case {case_id}")
    rows, order, first, have = {}, [], None, 0
    for run in d["runs"]:
        p = _part(path, run["id"], case_id)
        if p is None or "kl" not in p:
            continue
        first, have = first or p, have + 1
        key = (run["method"], _setting(run["method"], run["params"]))
        if key not in rows:
            rows[key] = []
            order.append(key)
        rows[key].append((p["tf"]["exact_frac"], _budget_label(run["method"], run["params"]),
                          float(np.mean(p["kl"])), float(np.mean(p["top1"])), _ppl(p["nll"])))
    if not have:
        raise ClaimsError(f"{path}: no run has a fidelity part for case {case_id}")
    out = [f"Case `{case_id}` ({first.get('desc', '')}): {len(first['kl'])} teacher-forced positions; "
           f"full attention's perplexity {_ppl(first['nll_full']):.2f}; {have} of {len(d['runs'])} runs.", "",
           "| run | exact % | KL mean | top-1 | ppl |", "|---|---|---|---|---|"]
    for key in order:
        method, setting = key
        pts = sorted(rows[key], key=lambda r: r[0])
        name = BUDGET.get(method, ("budget",))
        label = f"{method} {'/'.join(name)} = " + " / ".join(str(r[1]) for r in pts)
        if setting:
            label += ", " + ", ".join(f"{k} {v}" for k, v in setting)
        cols = [" / ".join(f"{100 * r[0]:.1f}" for r in pts), " / ".join(f"{r[2]:.4f}" for r in pts),
                " / ".join(f"{r[3]:.3f}" for r in pts), " / ".join(f"{r[4]:.2f}" for r in pts)]
        out.append(f"| {label} | " + " | ".join(cols) + " |")
    return "\n".join(out) + "\n"


def _offline_online(path):
    f = os.path.join(path, "offline-online.json")
    if not os.path.isfile(f):
        raise ClaimsError(f"{path}: no offline-online.json (the config's \"open_loop\" section writes it)")
    return f, _read_json(f)


def points(path, budget=0.05):
    f, o = _offline_online(path)
    runs = {r["label"]: r for r in load_dir(path)["runs"]}
    best = {}
    for pt in o.get("points") or []:
        run = runs.get(pt["label"])
        key = (pt["method"], _setting(pt["method"], run["params"]) if run else ())
        if pt.get("exact_frac") is None:
            continue
        if key not in best or abs(pt["exact_frac"] - budget) < abs(best[key]["exact_frac"] - budget):
            best[key] = pt
    if not best:
        raise ClaimsError(f"{f}: no points")
    out = [f"The point nearest {100 * budget:g} % exact tokens of each method setting (`{os.path.relpath(f)}`; "
           "open-loop means over the replayed layers, heads and steps):", "",
           "| run | exact % | recall@100 | mass | out_err | KL mean (closed) | NIAH acc (closed) |",
           "|---|---|---|---|---|---|---|"]
    for (method, _), pt in best.items():
        cells = [f"{100 * pt['exact_frac']:.1f}"] + [_fmt(pt.get(k), f) for k, f in (
            ("recall@100", "{:.2f}"), ("mass", "{:.3f}"), ("out_err", "{:.3f}"), ("kl_mean", "{:.4f}"),
            ("niah_accuracy", "{:.2f}"))]
        run = runs.get(pt["label"])
        out.append(f"| {short_label(run) if run else pt['label']} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def spearman(path, closed=None):
    f, o = _offline_online(path)
    table = o.get("table") or []
    opens = list(dict.fromkeys(t["open"] for t in table))
    closes = closed or list(dict.fromkeys(t["closed"] for t in table))
    rho = {(t["open"], t["closed"]): t for t in table}
    missing = [c for c in closes if not any((x, c) in rho for x in opens)]
    if missing:
        raise ClaimsError(f"{f}: no closed-loop measure {', '.join(missing)} (has: "
                          f"{', '.join(dict.fromkeys(t['closed'] for t in table))})")
    n = sorted({t["n"] for t in table if t["closed"] in closes})
    out = [f"Spearman's rho over {'/'.join(str(x) for x in n)} (method, budget) points "
           f"(`{os.path.relpath(f)}`):", "",
           "| open-loop \\ closed-loop | " + " | ".join(CLOSED_NAMES.get(c, c) for c in closes) + " |",
           "|---|" + "---|" * len(closes)]
    for x in opens:
        cells = []
        for c in closes:
            v = rho.get((x, c), {}).get("spearman")
            cells.append("–" if v is None else f"{v:+.2f}")
        out.append(f"| {x} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def _med(v):
    return float(np.median(v)) if v else None


def _fmt(v, f="{:.0f}"):
    return "–" if v is None else f.format(v)


def costs(path, kind="niah"):
    d = load_dir(path)
    cases = [c["id"] for c in d["cases"] if c["id"].startswith(kind + "-")]
    if not cases:
        raise ClaimsError(f"{path}: no {kind} case in its manifest")
    scratch, reused = [], []
    for c in cases:
        r = _part(path, REFERENCE, c)
        if r and r.get("prefill_s") is not None:
            (reused if r.get("prefill_reused_tokens") else scratch).append(r["prefill_s"])
    by = {}
    for run in d["runs"]:
        m = by.setdefault(run["method"], {"fresh": [], "copy": [], "step": [], "parts": 0})
        for c in cases:
            p = _part(path, run["id"], c)
            g = p.get("gen") if p else None
            if not isinstance(g, dict):
                continue
            m["parts"] += 1
            m["copy" if g.get("build_shared") else "fresh"].append(g["build_s"])
            m["step"] += list(g.get("step_ms") or [])
    out = [f"{len(cases)} {kind} cases in the manifest; prefill (reference parts' `prefill_s`): from scratch "
           f"{_fmt(_med(scratch))} s median over {len(scratch)}, reusing a kept prefix {_fmt(_med(reused))} s over "
           f"{len(reused)}.", "",
           "| method | parts | fresh builds | build s (median) | copies | copy s (median) | decode step ms (median) |",
           "|---|---|---|---|---|---|---|"]
    for method, m in by.items():
        out.append(f"| {method} | {m['parts']} | {len(m['fresh'])} | {_fmt(_med(m['fresh']), '{:.1f}')} | {len(m['copy'])} | "
                   f"{_fmt(_med(m['copy']), '{:.1f}')} | {_fmt(_med(m['step']))} |")
    return "\n".join(out) + "\n"


def steps(path):
    recs = read_runs(path)
    ref = recs[0].get("step_ms_median")
    if not ref:
        raise ClaimsError(f"{path}: its first record (the reference) has no step_ms_median")
    out = [f"Median wall ms per decode step (`{os.path.join(path, 'runs.jsonl')}`):", "",
           "| run | exact_frac | ms/step (median) | vs reference |", "|---|---|---|---|",
           f"| full attention (the model's own) | 1.000 | {ref:.0f} | 1.00 |"]
    for r in recs[1:]:
        ms = r.get("step_ms_median")
        out.append(f"| {short_label(r)} | {_fmt(r.get('exact_frac'), '{:.3f}')} | {_fmt(ms)} | "
                   f"{_fmt(ms / ref if ms else None, '{:.2f}')} |")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m retro_bench.closedloop.doc_views", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="view", required=True)
    a = sub.add_parser("fidelity")
    a.add_argument("results")
    a.add_argument("case")
    c = sub.add_parser("costs")
    c.add_argument("results")
    c.add_argument("kind", nargs="?", default="niah")
    e = sub.add_parser("points")
    e.add_argument("results")
    e.add_argument("budget", nargs="?", type=float, default=0.05)
    t = sub.add_parser("steps")
    t.add_argument("results")
    b = sub.add_parser("spearman")
    b.add_argument("results")
    b.add_argument("closed", nargs="*")
    args = ap.parse_args(argv)
    try:
        if args.view == "fidelity":
            text = fidelity(args.results, args.case)
        elif args.view == "costs":
            text = costs(args.results, args.kind)
        elif args.view == "steps":
            text = steps(args.results)
        elif args.view == "points":
            text = points(args.results, args.budget)
        else:
            text = spearman(args.results, args.closed or None)
    except ClaimsError as e:
        print(f"doc_views: error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
