#!/usr/bin/env python3
"""The answer to the papers (issue 27 #4): per context, each closed-loop run's NIAH accuracy minus full
attention's on the same cases, at its exact-token budget (docs/closed-loop.md):

    PYTHONPATH=python python3 -m retro_bench.closedloop.claims RESULTS_DIR [RESULTS_DIR ...] [--json] [--common]

Read from the part files (parts/<run_id>/<case_id>.json, parts/reference/...), not from runs.jsonl: the
records pool every context of a directory, and a sweep still running (or split over workers) has parts
but no runs.jsonl yet. A context is a prompt length rounded to the nearest 1,000 tokens ("16K"); runs of
the same model (the same run id: method, params and setup) in several directories are pooled per
context, each method part paired with full attention's answer on that case ("correct_full").

`--reference` prints instead full attention's own accuracy (issue 27 #2's first step): per model, context
and NIAH variant (multikey / single), the cases answered, the wrong ones by text and depth, the median
reference decode step; a case in several directories (a grid sharing a reference-only run's ids) counts
once.

Two tables per (model, context): every run (budget, accuracy, full's accuracy on the same cases, the
difference in points, accuracy on full's correct cases, cases present / expected, KL and top-1 on the
fidelity cases), and per method its points nearest to 1.8 / 5 / 10 % exact budget."""

import argparse
import hashlib
import json
import os
import sys

import numpy as np

from . import metrics
from .results import REFERENCE, read_json
from .tables import _f, short_label

TARGETS = (0.018, 0.05, 0.10)  # the papers' budgets, as fractions of the visible tokens
WITHIN_POINTS = 2.0


class ClaimsError(Exception):
    pass


# ----------------------------------------------------------------------------------------------------
# reading a results directory

def _read_json(path):
    try:
        return read_json(path)
    except (OSError, ValueError) as e:
        raise ClaimsError(f"{path}: unreadable ({e})") from None


def load_dir(path):
    """A closed-loop results directory's manifest, checked. Returns {path, model, cases: [{id, kind,
    prompt_len, answer}], runs: [{id, method, params, label}]}; ClaimsError naming what is missing."""
    what = f"{path} is not a closed-loop results directory"
    if not os.path.isdir(path):
        raise ClaimsError(f"{what}: no such directory")
    mpath = os.path.join(path, "manifest.json")
    if not os.path.isfile(mpath):
        raise ClaimsError(f"{what}: no manifest.json")
    m = _read_json(mpath)
    if not isinstance(m, dict) or m.get("experiment") != "closed-loop":
        raise ClaimsError(f"{what}: manifest.json has no \"experiment\": \"closed-loop\"")
    if not m.get("cases"):  # written once the model loaded and the cases were built
        raise ClaimsError(f"{what}: manifest.json lists no cases (no session got past loading the model)")
    runs = (m.get("resolved") or {}).get("runs")
    if not isinstance(runs, list):
        raise ClaimsError(f"{what}: manifest.json has no resolved runs")
    if not os.path.isdir(os.path.join(path, "parts", REFERENCE)):
        raise ClaimsError(f"{what}: no parts/{REFERENCE}/ (full attention's part files)")
    cfg = m.get("config") if isinstance(m.get("config"), dict) else {}
    return {"path": path, "model": _model_name(m, path), "cases": m["cases"], "runs": runs,
            "only_answered": bool(cfg.get("only_where_reference_answers"))}


def load_dirs(paths):
    """load_dir of each path, a directory given twice (by any path) once: it would count its cases twice."""
    dirs, seen = [], set()
    for p in paths:
        if os.path.realpath(p) not in seen:
            seen.add(os.path.realpath(p))
            dirs.append(load_dir(p))
    return dirs


def _model_name(manifest, path):
    model = manifest.get("model")
    if isinstance(model, dict) and model.get("name"):
        return model["name"]
    cfg = manifest.get("config")
    return cfg["model"] if isinstance(cfg, dict) and isinstance(cfg.get("model"), str) else os.path.basename(path)


def _part(path, run_id, case_id):
    p = os.path.join(path, "parts", run_id, case_id + ".json")
    return _read_json(p) if os.path.exists(p) else None


def context_of(prompt_len):
    """Prompt length -> context in tokens, rounded to the nearest 1,000 (16384 and 16000 are both 16K)."""
    return int(prompt_len / 1000 + 0.5) * 1000


def context_label(ctx):
    return f"{ctx // 1000}K" if ctx else "<0.5K"


# ----------------------------------------------------------------------------------------------------
# numbers

def _scored(p):
    """A part whose generation is scored against an answer (NIAH, a cases file's task line)."""
    return p.get("answer") is not None and "correct" in p


def _exact_frac(parts):
    """Mean exact_frac over every decode loop (teacher-forced "tf", greedy "gen") of the parts, as the
    runner's record computes it over a whole run; None without loops."""
    v = [p[k]["exact_frac"] for p in parts for k in ("tf", "gen") if isinstance(p.get(k), dict)]
    return float(np.mean(v)) if v else None


def run_row(run, parts, expected):
    """One run at one context. parts: its part dicts present there; expected: the context's case count.
    Returns {run_id, method, params, label, exact_frac, cases, expected, task_cases, accuracy,
    full_accuracy, diff_points, accuracy_on_full_correct, full_correct_cases, fidelity_cases, kl_mean,
    top1, ppl, ppl_full}; accuracies are fractions (None without scored cases), diff_points = 100 x (method - full)."""
    task = metrics.summarize_task([p for p in parts if _scored(p)]) or {}
    fid = metrics.summarize_fidelity([p for p in parts if "kl" in p]) or {}
    acc, full = task.get("accuracy"), task.get("accuracy_full")
    return {"run_id": run["id"], "method": run["method"], "params": run["params"], "label": short_label(run),
            "exact_frac": _exact_frac(parts), "cases": len(parts), "expected": expected,
            "task_cases": task.get("niah_cases", 0), "accuracy": acc, "full_accuracy": full,
            "diff_points": 100.0 * (acc - full) if acc is not None else None,
            "accuracy_on_full_correct": task.get("accuracy_on_full_correct"),
            "full_correct_cases": task.get("full_correct_cases", 0),
            "fidelity_cases": fid.get("cases", 0), "kl_mean": fid.get("kl_mean"), "top1": fid.get("top1"),
            "ppl": fid.get("ppl"), "ppl_full": fid.get("ppl_full")}


def _within(diff):
    """"yes" within WITHIN_POINTS of full, else "no" (below) or "above" (a method can beat full by chance)."""
    if abs(diff) <= WITHIN_POINTS + 1e-9:
        return "yes"
    return "above" if diff > 0 else "no"


TIE = 0.001  # exact_frac within 0.1 point of a method's nearest row: the same budget


def matched(rows):
    """Per method and target budget, its row with the exact_frac nearest the target (ties: the smaller
    budget) and every other row of the method at that same budget (within TIE): variants that spend the
    budget alike (wave with and without its estimation zone, whose estimated tokens are not exact ones)
    each get their line instead of the first in run order standing for all. rows: run_row dicts. Returns
    [{method, target, run_id, label, exact_frac, accuracy, full_accuracy, diff_points, within}] in method,
    target, then run order; methods without budgets or accuracies are left out."""
    out = []
    for method in sorted({r["method"] for r in rows}):
        rs = [r for r in rows if r["method"] == method and r["exact_frac"] is not None and r["accuracy"] is not None]
        for t in TARGETS if rs else ():
            best = min(rs, key=lambda r: (abs(r["exact_frac"] - t), r["exact_frac"]))
            for r in (r for r in rs if abs(r["exact_frac"] - best["exact_frac"]) <= TIE):
                out.append({"method": method, "target": t, **{k: r[k] for k in (
                    "run_id", "label", "exact_frac", "accuracy", "full_accuracy", "diff_points")},
                    "within": _within(r["diff_points"])})
    return out


def _collect(dirs):
    """Parts grouped by (model, context): {(model, ctx): {"dirs", "expected", "reference": [parts],
    "reference_all": [parts], "only_answered", "runs": {run_id: {"run", "parts", "expected"}}}}, in the
    directories' order. A directory whose config runs the methods only where full attention answers
    ("only_where_reference_answers") expects no run part on a case its reference got wrong and ignores any."""
    groups = {}
    for d in dirs:
        by_ctx = {}
        for c in d["cases"]:
            by_ctx.setdefault(context_of(c["prompt_len"]), []).append(c["id"])
        for ctx, ids in sorted(by_ctx.items()):
            g = groups.setdefault((d["model"], ctx), {"dirs": [], "expected": 0, "reference": [], "runs": {},
                                                      "only_answered": False})
            g["dirs"].append(d["path"])
            g["expected"] += len(ids)
            ref = [p for p in (_part(d["path"], REFERENCE, i) for i in ids) if p is not None]
            g["reference"] += ref
            misses = {p["case"] for p in ref if _scored(p) and not p["correct"]} if d["only_answered"] else set()
            g["only_answered"] |= bool(misses)
            for run in d["runs"]:
                r = g["runs"].setdefault(run["id"], {"run": run, "parts": [], "expected": 0})
                r["expected"] += len(ids) - len(misses)
                # parts written before the option was set, on a missed case, are left out as well
                r["parts"] += [p for p in (_part(d["path"], run["id"], i) for i in ids if i not in misses) if p is not None]
    return groups


def _reference(parts, expected):
    """Full attention at one context over all its cases present: {cases, expected, task_cases, correct,
    accuracy}."""
    scored = [p for p in parts if _scored(p)]
    correct = sum(bool(p["correct"]) for p in scored)
    return {"cases": len(parts), "expected": expected, "task_cases": len(scored), "correct": correct,
            "accuracy": correct / len(scored) if scored else None}


def _keep_common(g):
    """A group restricted to the cases the reference and every run of it have (a grid in progress: every
    row then stands on the same cases); expected becomes their number."""
    have = [{p["case"] for p in g["reference"]}] + [{p["case"] for p in r["parts"]} for r in g["runs"].values()]
    common = set.intersection(*have)
    g["reference"] = [p for p in g["reference"] if p["case"] in common]
    g["expected"] = len(common)
    for r in g["runs"].values():
        r["parts"] = [p for p in r["parts"] if p["case"] in common]
        r["expected"] = len(common)


def claims(paths, common=False):
    """The numbers behind the tables. paths: closed-loop results directories (ClaimsError for one that is
    not); common: every (model, context) on the cases all its runs and the reference have. Returns
    {"dirs": [...], "contexts": [{model, context, label, dirs, reference, rows, matched}]}, contexts by
    model (first appearance) then length, rows by method then exact_frac."""
    dirs = load_dirs(paths)
    groups = _collect(dirs)
    for g in groups.values():
        g["reference_all"] = list(g["reference"])
    models = list(dict.fromkeys(d["model"] for d in dirs))
    out = []
    for (model, ctx) in sorted(groups, key=lambda k: (models.index(k[0]), k[1])):
        g = groups[(model, ctx)]
        if common:
            _keep_common(g)
        rows = [run_row(r["run"], r["parts"], r["expected"]) for r in g["runs"].values()]
        rows.sort(key=lambda r: (r["method"], r["exact_frac"] is None, r["exact_frac"] or 0.0, r["label"]))
        out.append({"model": model, "context": ctx, "label": context_label(ctx), "dirs": g["dirs"],
                    "reference": _reference(g["reference"], g["expected"]),
                    "reference_all": _reference(g["reference_all"], len(g["reference_all"])),
                    "methods_only_where_full_answers": g["only_answered"], "rows": rows, "matched": matched(rows)})
    return {"dirs": [d["path"] for d in dirs], "contexts": out}


def _niah_fields(desc):
    """A builtin NIAH case's (text, depth, variant) from its desc ("mobydick 16000 d0.4 multikey shared");
    other scored cases: (desc, None, "task")."""
    words = desc.split()
    variant = next((w for w in words if w in ("multikey", "single")), None)
    depth = next((w[1:] for w in words[1:] if w[:1] == "d" and w[1:].replace(".", "", 1).isdigit()), None)
    return (words[0], depth, variant) if variant and words else (desc, None, "task")


def _prompt_key(path, case_id):
    """What makes two directories' cases the same case: their prompt's token ids (prompts/<case>.json;
    configs that differ elsewhere give the same prompt other case ids), else the case id."""
    f = os.path.join(path, "prompts", f"{case_id}.json")
    try:
        with open(f) as fh:
            ids = json.load(fh)
    except (OSError, ValueError):
        return case_id
    return hashlib.sha1(json.dumps(ids).encode()).hexdigest() if isinstance(ids, list) else case_id


def reference_accuracy(paths):
    """Full attention's own accuracy: [{model, context, label, variant, cases, correct, wrong: ["text dD"],
    step_ms_median}] by model (first appearance), context, variant; each scored case once per model (its
    first directory's reference part; the same prompt under another case id is the same case)."""
    dirs = load_dirs(paths)
    groups, counted = {}, set()
    for d in dirs:
        for c in d["cases"]:
            part = _part(d["path"], REFERENCE, c["id"])
            key = (d["model"], _prompt_key(d["path"], c["id"]))
            if part is None or not _scored(part) or key in counted:
                continue
            counted.add(key)
            text, depth, variant = _niah_fields(part.get("desc", c["id"]))
            g = groups.setdefault((d["model"], context_of(c["prompt_len"]), variant), {"parts": [], "wrong": []})
            g["parts"].append(part)
            if not part["correct"]:
                g["wrong"].append(f"{text} d{depth}" if depth else text)
    models = list(dict.fromkeys(d["model"] for d in dirs))
    out = []
    for (model, ctx, variant) in sorted(groups, key=lambda k: (models.index(k[0]), k[1], k[2])):
        g = groups[(model, ctx, variant)]
        steps = [x for p in g["parts"] for x in (p.get("gen") or {}).get("step_ms", [])]
        out.append({"model": model, "context": ctx, "label": context_label(ctx), "variant": variant,
                    "cases": len(g["parts"]), "correct": sum(bool(p["correct"]) for p in g["parts"]),
                    "wrong": sorted(g["wrong"]), "step_ms_median": float(np.median(steps)) if steps else None})
    return out


def reference_markdown(rows):
    lines = ["| model | context | variant | correct | wrong (text, depth) | decode step (median) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        step = f"{r['step_ms_median'] / 1000:.2f} s" if r["step_ms_median"] is not None else "–"
        lines.append(f"| {r['model']} | {r['label']} | {r['variant']} | {r['correct']}/{r['cases']} | "
                     f"{', '.join(r['wrong']) or '-'} | {step} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------
# Markdown

def _pct(v):
    return _f(None if v is None else 100.0 * v, "{:.1f}")


def _budget(v):
    """exact_frac as a percentage: two decimals below 1 % (0.35 %), one above."""
    return _f(None if v is None else 100.0 * v, "{:.2f}" if v is not None and v < 0.01 else "{:.1f}")


def _diff(v):
    return _f(v, "{:+.1f}")


def _run_table(c):
    lines = ["| run | exact % | NIAH acc % | full acc % | Δ pts | acc on full-correct % | cases | KL mean | top-1 | ppl (full's) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in c["rows"]:
        lines.append(f"| {r['label']} | {_budget(r['exact_frac'])} | {_pct(r['accuracy'])} | "
                     f"{_pct(r['full_accuracy'])} | {_diff(r['diff_points'])} | "
                     f"{_pct(r['accuracy_on_full_correct'])} | {r['cases']}/{r['expected']} cases | "
                     f"{_f(r['kl_mean'], '{:.4f}')} | {_f(r['top1'], '{:.3f}')} | "
                     f"{_f(r['ppl'], '{:.2f}')}{_f(r['ppl_full'], ' ({:.2f})') if r['ppl'] is not None else ''} |")
    return lines


def _matched_table(c):
    lines = [f"| method | target | run | exact % | NIAH acc % | full acc % | Δ pts | within {WITHIN_POINTS:g} pts |",
             "|---|---|---|---|---|---|---|---|"]
    for m in c["matched"]:
        lines.append(f"| {m['method']} | {_budget(m['target'])} % | {m['label']} | {_budget(m['exact_frac'])} | "
                     f"{_pct(m['accuracy'])} | {_pct(m['full_accuracy'])} | {_diff(m['diff_points'])} | {m['within']} |")
    return lines


def _reference_line(c):
    ref = c["reference"]
    answered = (f"{ref['correct']}/{ref['task_cases']} NIAH cases answered ({_pct(ref['accuracy'])} %)"
                if ref["task_cases"] else "no NIAH cases at this context")
    line = (f"Full attention: {answered}; reference parts {ref['cases']}/{ref['expected']} cases; from "
            f"{', '.join(c['dirs'])}. Each run's \"full acc\" is full attention's on the run's own cases.")
    every = c["reference_all"]
    if c["methods_only_where_full_answers"]:
        line += (f" The methods ran only on the cases full attention answers (\"only_where_reference_answers\"):"
                 f" it answers {every['correct']} of its {every['task_cases']} NIAH cases here.")
    elif every["cases"] != ref["cases"]:
        line += f" On all {every['task_cases']} of its NIAH cases here it answers {every['correct']}."
    return line


def markdown(result):
    """The two tables of every (model, context) as one Markdown string."""
    out = []
    for c in result["contexts"]:
        out += [f"### {c['model']} · {c['label']}", "", _reference_line(c), ""] + _run_table(c) + [""]
        if c["matched"]:
            out += [f"At matched budgets ({c['label']}):", ""] + _matched_table(c) + [""]
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Closed-loop NIAH accuracy minus full attention's, per context.")
    ap.add_argument("dirs", nargs="+", metavar="RESULTS_DIR", help="closed-loop results directories")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON instead of Markdown")
    ap.add_argument("--common", action="store_true",
                    help="per context, only the cases that full attention and every run have (a grid in progress)")
    ap.add_argument("--reference", action="store_true",
                    help="full attention's own accuracy per context and variant instead (each case once)")
    args = ap.parse_args(argv)
    try:
        if args.reference:
            rows = reference_accuracy(args.dirs)
            print(json.dumps(rows, indent=1) if args.json else reference_markdown(rows))
            return 0
        result = claims(args.dirs, common=args.common)
    except ClaimsError as e:
        print(f"claims.py: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1) if args.json else markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
