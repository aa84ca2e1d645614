"""Helpers shared by the figures' data functions (pure Python: no matplotlib)."""
from collections import OrderedDict

from ..results import fmt_value


# helpers shared by the data functions

WAVE = "wave"
# RetroInfer's defaults (§4-5; docs/methods/wave.md): used to break ties when finding a sweep's centre.
WAVE_DEFAULTS = {"retrieval": 0.018, "estimation": 0.232, "sink": 4, "window": 64, "segment": 8192,
                 "update_segment": 1024, "final_assign": "global",
                 "final_global_assign": True}  # results made before final_assign existed


def wave_final_assign(params):
    """A wave run's k-means final pass: `final_assign` (global | local | probe | none), or the older boolean
    `final_global_assign` of results made before it (true = global, false = none); None if neither."""
    if "final_assign" in params:
        return params["final_assign"]
    fga = params.get("final_global_assign")
    return None if fga is None else ("global" if fga else "none")


def params_key(params, drop=()):
    return tuple(sorted((k, fmt_value(v)) for k, v in params.items() if k not in drop))


def first_trace_runs(res, method):
    """The method's runs on the first trace at its most common system-model point (a config sweeping
    the GPU cache repeats identical method parameters once per cache setting)."""
    traces = res.traces()
    runs = [r for r in res.runs_of(method) if not traces or r.get("trace") == traces[0]]
    counts = OrderedDict()
    for r in runs:
        k = params_key(r.get("system", {}))
        counts[k] = counts.get(k, 0) + 1
    if len(counts) > 1:
        top = max(counts, key=counts.get)
        runs = [r for r in runs if params_key(r.get("system", {})) == top]
    return runs


def accuracy_metrics(res):
    rk = res.recall_metric(100)
    return [m for m in (rk, "mass", "out_err") if m and res.has_metric(m)]


def pareto_front(points, higher_better):
    """points: dicts with x (cost, lower is better) and y. Returns (front, dominated), the front sorted by
    x: a point is on it when no other point has x <= its x and a strictly better y (ties in x keep the
    better y)."""
    pts = sorted(points, key=lambda p: (p["x"], -p["y"] if higher_better else p["y"]))
    front, dominated, best = [], [], None
    for p in pts:
        better = best is None or (p["y"] > best if higher_better else p["y"] < best)
        if better:
            front.append(p)
            best = p["y"]
        else:
            dominated.append(p)
    return front, dominated


def sweep_centre(runs, defaults=None):
    """The sweep centre of a one-at-a-time sweep: each parameter's most frequent value, ties broken by
    `defaults` then by first appearance."""
    defaults = defaults or {}
    centre = {}
    names = []
    for r in runs:
        for k in r["params"]:
            if k not in names:
                names.append(k)
    for k in names:
        counts = OrderedDict()
        for r in runs:
            v = fmt_value(r["params"].get(k))
            counts[v] = counts.get(v, 0) + 1
        top = max(counts.values())
        cands = [v for v, c in counts.items() if c == top]
        pick = cands[0]
        if k in defaults and fmt_value(defaults[k]) in cands:
            pick = fmt_value(defaults[k])
        centre[k] = pick
    return centre


def differs_only_in(params, centre, axis):
    return all(fmt_value(params.get(k)) == v for k, v in centre.items() if k not in axis) and \
        all(k in centre for k in params)
