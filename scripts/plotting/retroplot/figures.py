"""The figure registry.

Each figure is one data function and one draw function:

    @figure("name", title=..., needs=..., size=(w, h))
    def name(res):            # Results -> JSON-able series dict, or None when the results lack the data
        ...
    @drawer("name")
    def _draw_name(s, fig):   # series dict -> axes on a matplotlib Figure (no data access here)
        ...

A figure applies to a results directory exactly when its data function returns a dict. Data functions
are pure Python (no matplotlib), so tests check which series and points each figure shows; the `plot`
command also writes each figure's series next to it (figures/<name>.json).
"""
import math
import statistics
from collections import OrderedDict

from . import style
from .results import metric, fmt_value


class Figure:
    def __init__(self, name, title, needs, data, size, paper=""):
        self.name, self.title, self.needs, self.data, self.size, self.paper = name, title, needs, data, size, paper
        self.draw = None

    def applies(self, res):
        return self.data(res) is not None


FIGURES = OrderedDict()


def figure(name, title, needs, size=(style.COLUMN_W, 1.7), paper=""):
    def deco(fn):
        FIGURES[name] = Figure(name, title, needs, fn, size, paper)
        return fn
    return deco


def drawer(name):
    def deco(fn):
        FIGURES[name].draw = fn
        return fn
    return deco


# ----------------------------------------------------------------------------------------------------
# helpers shared by the data functions

WAVE = "wave"
# RetroInfer's defaults (§4-5; docs/methods/wave.md): used to break ties when finding a sweep's centre.
WAVE_DEFAULTS = {"retrieval": 0.018, "estimation": 0.232, "sink": 4, "window": 64, "segment": 8192,
                 "update_segment": 1024, "final_global_assign": True}


def _key(params, drop=()):
    return tuple(sorted((k, fmt_value(v)) for k, v in params.items() if k not in drop))


def _first_trace_runs(res, method):
    """The method's runs on the first trace at its most common system-model point (a config sweeping
    the GPU cache repeats identical method parameters once per cache setting)."""
    traces = res.traces()
    runs = [r for r in res.runs_of(method) if not traces or r.get("trace") == traces[0]]
    counts = OrderedDict()
    for r in runs:
        k = _key(r.get("system", {}))
        counts[k] = counts.get(k, 0) + 1
    if len(counts) > 1:
        top = max(counts, key=counts.get)
        runs = [r for r in runs if _key(r.get("system", {})) == top]
    return runs


def _accuracy_metrics(res):
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


def _centre(runs, defaults=None):
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


def _differs_only_in(params, centre, axis):
    return all(fmt_value(params.get(k)) == v for k, v in centre.items() if k not in axis) and \
        all(k in centre for k in params)


# ----------------------------------------------------------------------------------------------------
# 1. accuracy vs. budget (Pareto front per method)

@figure("accuracy_budget", "Accuracy vs. exact-token budget (Pareto front per method)",
        needs="runs of at least two methods (other than full) with exact_frac and recall@k/mass/out_err",
        size=(style.WIDE_W, 1.75), paper="RetroInfer Fig. 12-13 / RetrievalAttention Tab. 2 style")
def accuracy_budget(res):
    methods = [m for m in res.methods() if m != "full"
               and any(metric(r, "exact_frac") is not None for r in res.runs_of(m))]
    if len(methods) < 2:
        return None
    metrics = _accuracy_metrics(res)
    if not metrics:
        return None
    panels = []
    for met in metrics:
        hb = style.metric_direction(met) == "higher"
        series = []
        for m in methods:
            pts = []
            for r in res.runs_of(m):
                x, y = metric(r, "exact_frac"), metric(r, met)
                if x is None or y is None:
                    continue
                pts.append({"x": x, "y": y, "run_id": r["run_id"], "label": res.short_label(r, False)})
            if not pts:
                continue
            front, dom = pareto_front(pts, hb)
            series.append({"method": m, "points": front, "dominated": dom})
        panels.append({"metric": met, "series": series})
    ref = None
    for r in res.runs_of("full"):
        ref = {"run_id": r["run_id"], "x": metric(r, "exact_frac") or 1.0,
               "y": {met: metric(r, met) for met in metrics}}
        break
    return {"x_metric": "exact_frac", "panels": panels, "reference": ref}


# ----------------------------------------------------------------------------------------------------
# 2. recall vs. scanned fraction, decode queries vs. keys as queries (RetrievalAttention Fig. 3a / 6)

_OOD_X = ("scanned_frac", "scan_frac", "scanned_fraction", "frac_scanned", "scanned", "scan_ops")
_OOD_NAME = ("index", "method", "name", "label")
_OOD_Q = ("queries", "query", "query_type", "query_kind", "query_source", "search")


def _ood_query_kind(v):
    s = str(v).lower().replace("-", "_").replace(" ", "_")
    if s in ("keys", "key", "k", "k2k", "k_to_k", "key_queries", "keys_as_queries") or s.startswith("k_to") \
            or s.startswith("key"):
        return "keys"
    return "decode"


def _ood_y_key(d, k):
    for c in (f"recall@{k}" if k else None, "recall", "recall_at_k"):
        if c and c in d:
            return c
    for c in d:
        if str(c).startswith("recall@"):
            return c
    return None


def _ood_index_name(obj):
    name = str(obj.get("index", "index"))
    if obj.get("mips") and obj.get("mips") != "ip":
        name += f" ({obj['mips']})"
    return name


def _ood_records(obj):
    """Flattens one ood-recall JSON into (name, query_kind, x, y) records and k. Accepts the output of
    `retro-bench ood-recall TRACE --json FILE` (one index per file: 'mean' rows with scanned_decode /
    recall_decode / scanned_keys / recall_keys per search setting) and a generic form (docs/plots.md)."""
    k = obj.get("k") or obj.get("recall_k")
    if isinstance(k, list):
        k = k[0] if k else None
    out = []
    mean = obj.get("mean")
    if isinstance(mean, list) and mean and isinstance(mean[0], dict) and "recall_decode" in mean[0]:
        name = _ood_index_name(obj)
        for p in mean:
            for qk, xk, yk in (("decode", "scanned_decode", "recall_decode"), ("keys", "scanned_keys", "recall_keys")):
                if p.get(xk) is not None and p.get(yk) is not None:
                    out.append((name, qk, float(p[xk]), float(p[yk])))
        return k, out
    lists = None
    for key in ("series", "curves", "results", "records", "points"):
        if isinstance(obj.get(key), list):
            lists = obj[key]
            break
    if lists is None:
        return k, out
    for s in lists:
        if not isinstance(s, dict):
            continue
        name = next((str(s[c]) for c in _OOD_NAME if c in s), "index")
        qk = _ood_query_kind(next((s[c] for c in _OOD_Q if c in s), "decode"))
        pts = s.get("points")
        if isinstance(pts, list):
            for p in pts:
                if not isinstance(p, dict):
                    continue
                xk = next((c for c in _OOD_X if c in p), None)
                yk = _ood_y_key(p, k)
                if xk and yk and p[xk] is not None and p[yk] is not None:
                    out.append((name, qk, float(p[xk]), float(p[yk])))
            continue
        xk = next((c for c in _OOD_X if c in s), None)
        yk = _ood_y_key(s, k)
        if xk and yk:
            xs, ys = s[xk], s[yk]
            if isinstance(xs, list) and isinstance(ys, list):
                out += [(name, qk, float(x), float(y)) for x, y in zip(xs, ys) if x is not None and y is not None]
            elif xs is not None and ys is not None:
                out.append((name, qk, float(xs), float(ys)))
    return k, out


@figure("ood_recall", "Recall vs. scanned keys: decode queries vs. keys as queries",
        needs="an ood-recall JSON file in the results directory (retro-bench ood-recall)",
        size=(style.COLUMN_W, 1.7), paper="RetrievalAttention Fig. 3a / Fig. 6")
def ood_recall(res):
    recs, k = [], None
    for obj in res.extras["ood_recall"]:
        kk, r = _ood_records(obj)
        k = k or kk
        recs += r
    if not recs:
        return None
    panels = []
    for qk, title in (("decode", "Q to K (decode queries)"), ("keys", "K to K (keys as queries)")):
        names = []
        for n, q, _, _ in recs:
            if q == qk and n not in names:
                names.append(n)
        series = []
        for n in names:
            pts = sorted((x, y) for nn, q, x, y in recs if nn == n and q == qk)
            series.append({"index": n, "points": [[x, y] for x, y in pts]})
        if series:
            panels.append({"queries": qk, "title": title, "series": series})
    return {"k": k or 100, "panels": panels}


# ----------------------------------------------------------------------------------------------------
# 3. zone sweeps (RetroInfer Fig. 17)

ZONE_AXES = (("retrieval", ("retrieval",), "Retrieval budget (% of clusters)"),
             ("estimation", ("estimation",), "Estimation budget (% of clusters)"),
             ("steady", ("sink", "window"), "Steady zone (sink + window tokens)"))


def _zone_point_x(axis, params):
    if axis == "steady":
        return f"{params.get('sink')}+{params.get('window')}"
    return params.get(axis)


@figure("zone_sweeps", "Wave index zone sizes: accuracy vs. retrieval budget, estimation budget, steady zone",
        needs="wave runs sweeping at least two of retrieval / estimation / sink+window one at a time "
              "(3+ points each)",
        size=(style.WIDE_W, lambda s: 3.1 + (0.85 if s.get("system_metric") else 0.0)),
        paper="RetroInfer Fig. 17")
def zone_sweeps(res):
    runs = _first_trace_runs(res, WAVE)
    if len(runs) < 5:
        return None
    centre = _centre(runs, WAVE_DEFAULTS)
    metrics = _accuracy_metrics(res)
    # modeled speed (docs/system-model.md §4): model_us is one layer's attention time per decode step
    sysm = "model_us" if res.has_metric("model_us") else None
    panels = []
    for axis, names, xlabel in ZONE_AXES:
        pts = []
        for r in runs:
            if not _differs_only_in(r["params"], centre, names):
                continue
            pts.append({"x": _zone_point_x(axis, r["params"]), "run_id": r["run_id"],
                        "is_centre": all(fmt_value(r["params"].get(k)) == centre.get(k) for k in names),
                        "params": {k: r["params"].get(k) for k in names},
                        "y": {m: metric(r, m) for m in metrics + ([sysm] if sysm else [])}})
        if axis == "steady":
            pts.sort(key=lambda p: (p["params"]["sink"] + p["params"]["window"], p["params"]["window"]))
        else:
            pts.sort(key=lambda p: p["x"])
        if len({fmt_value(q["x"]) for q in pts}) >= 3:
            panels.append({"axis": axis, "xlabel": xlabel, "points": pts})
    if len(panels) < 2:
        return None
    return {"metrics": metrics, "system_metric": sysm, "centre": centre, "panels": panels}


# ----------------------------------------------------------------------------------------------------
# 4. with / without estimation at equal retrieval budget (RetroInfer Fig. 18a)

@figure("estimation", "Wave index with and without the estimation zone",
        needs="wave runs with estimation = 0 and > 0 at the same retrieval budget",
        size=(style.WIDE_W, 1.75), paper="RetroInfer Fig. 18a")
def estimation(res):
    runs = _first_trace_runs(res, WAVE)
    groups = OrderedDict()   # other params -> {retrieval: {estimation: run}}
    for r in runs:
        p = r["params"]
        if "estimation" not in p or "retrieval" not in p:
            continue
        g = groups.setdefault(_key(p, ("estimation", "retrieval")), OrderedDict())
        g.setdefault(p["retrieval"], OrderedDict())[p["estimation"]] = r

    def paired(g):
        return [rv for rv, by in g.items() if 0 in by and any(e > 0 for e in by)]
    best = max(groups.values(), key=lambda g: len(paired(g)), default=None)
    if best is None or not paired(best):
        return None
    rvals = sorted(paired(best))
    ests = sorted({e for rv in rvals for e in best[rv]})
    metrics = _accuracy_metrics(res)
    variants = []
    for e in ests:
        rs = [best[rv].get(e) for rv in rvals]
        variants.append({"estimation": e,
                         "label": "w/o estimation" if e == 0 else f"w/ estimation ({style.pct_label(e)})",
                         "run_ids": [r["run_id"] if r else None for r in rs],
                         "exact_frac": [metric(r, "exact_frac") if r else None for r in rs],
                         "y": {m: [metric(r, m) if r else None for r in rs] for m in metrics}})
    # References: for each other method, its run attending closest to wave's exact-token count
    # (log distance, within a factor 1.5) at the middle retrieval budget.
    mid = rvals[len(rvals) // 2]
    target = statistics.mean(x for x in (metric(r, "exact_frac") for r in best[mid].values()) if x is not None)
    refs = []
    for m in res.methods():
        if m in (WAVE, "full"):
            continue
        cands = [r for r in res.runs_of(m) if metric(r, "exact_frac")]
        if not cands:
            continue
        r = min(cands, key=lambda r: abs(math.log(metric(r, "exact_frac") / target)))
        if abs(math.log(metric(r, "exact_frac") / target)) > math.log(1.5):
            continue
        lab = res.short_label(r, False)
        if lab == "defaults":
            lab = " ".join(f"{k}={fmt_value(v)}" for k, v in list(r["params"].items())[:3])
        refs.append({"method": m, "run_id": r["run_id"], "label": lab,
                     "exact_frac": metric(r, "exact_frac"), "y": {met: metric(r, met) for met in metrics}})
    return {"metrics": metrics, "retrieval": rvals, "variants": variants, "references": refs,
            "target_exact_frac": target}


# ----------------------------------------------------------------------------------------------------
# 5. segment size vs. build time and recall (RetroInfer Fig. 18b)

@figure("segments", "Segmented clustering: index build time vs. recall per segment size",
        needs="wave runs with at least two segment sizes (otherwise equal parameters)",
        size=(style.COLUMN_W, 2.0), paper="RetroInfer Fig. 18b")
def segments(res):
    runs = _first_trace_runs(res, WAVE)
    rk = res.recall_metric(100)
    if not rk:
        return None
    groups = OrderedDict()
    for r in runs:
        p = r["params"]
        if "segment" not in p:
            continue
        groups.setdefault(_key(p, ("segment", "final_global_assign")), []).append(r)
    best = max(groups.values(), key=lambda g: len({r["params"]["segment"] for r in g}), default=None)
    if not best or len({r["params"]["segment"] for r in best}) < 2:
        return None
    P = res.prompt_len()
    variants = OrderedDict()
    for r in best:
        fga = r["params"].get("final_global_assign")
        variants.setdefault(fmt_value(fga), {"final_global_assign": fga, "points": []})["points"].append(r)
    out = []
    for v in variants.values():
        pts = []
        for r in v["points"]:
            seg = r["params"]["segment"]
            whole = seg == 0 or (P and seg >= P)
            pts.append({"segment": seg, "segment_label": "global" if whole else style.tokens_label(seg),
                        "build_ms": metric(r, "build_ms"), "build_ms_p50": metric(r, "build_ms", "p50"),
                        "recall": metric(r, rk), "out_err": metric(r, "out_err"), "run_id": r["run_id"]})
        pts.sort(key=lambda p: -(P or 1e18) if p["segment"] == 0 else -p["segment"])
        fga = v["final_global_assign"]
        label = ("segmented" if fga is None else
                 "with final global assignment" if fga else "pure segmented (no global pass)")
        out.append({"final_global_assign": fga, "label": label, "points": pts})
    return {"recall_metric": rk, "prompt_len": P, "variants": out}


# ----------------------------------------------------------------------------------------------------
# 6. decode-time index updates (RetroInfer §4.2)

@figure("updates", "Decode-time index updates: accuracy and GPU memory over a long generation",
        needs="wave runs with at least two update_segment values, and their parts/ files (per-step samples)",
        size=(style.WIDE_W, 1.75), paper="RetroInfer §4.2 (long-output setting)")
def updates(res):
    runs = _first_trace_runs(res, WAVE)
    groups = OrderedDict()
    for r in runs:
        if "update_segment" in r["params"]:
            groups.setdefault(_key(r["params"], ("update_segment",)), []).append(r)
    best = max(groups.values(), key=lambda g: len({r["params"]["update_segment"] for r in g}), default=None)
    if not best or len({r["params"]["update_segment"] for r in best}) < 2:
        return None
    rk = res.recall_metric(100)
    metrics = [m for m in (rk, "out_err", "gpu_bytes") if m]
    variants = []
    for r in sorted(best, key=lambda r: -r["params"]["update_segment"] if r["params"]["update_segment"] else 1):
        us = r["params"]["update_segment"]
        per = {m: res.per_step(r["run_id"], m) for m in metrics}
        if not per["out_err"]:
            return None
        variants.append({"update_segment": us, "run_id": r["run_id"], "method": WAVE,
                         "label": f"update every {style.tokens_label(us)}" if us else "no updates (decode tokens exact)",
                         "steps": sorted(per["out_err"]),
                         "y": {m: [per[m].get(s) for s in sorted(per["out_err"])] for m in metrics},
                         "mean": {m: metric(r, m) for m in metrics + ["exact_frac"]}})
    for r in res.runs_of("full")[:1]:
        per = res.per_step(r["run_id"], "gpu_bytes")
        if per:
            variants.append({"update_segment": None, "run_id": r["run_id"], "method": "full", "label": "full attention",
                             "steps": sorted(per), "y": {"gpu_bytes": [per[s] for s in sorted(per)]},
                             "mean": {m: metric(r, m) for m in metrics + ["exact_frac"]}})
    return {"metrics": metrics, "variants": variants}


# ----------------------------------------------------------------------------------------------------
# 7. per layer x query head heatmap of out_err (RetroInfer Fig. 4 style)

@figure("head_heatmap", "Output error per layer and query head",
        needs="per_head.csv with runs of a method other than full",
        size=(style.COLUMN_W, None), paper="RetroInfer Fig. 4(a) style")
def head_heatmap(res, metric_name="out_err", max_panels=8):
    rows = [r for r in res.per_head if r.get("method") != "full" and r.get(metric_name) is not None]
    if not rows:
        return None
    wanted = list(getattr(res, "options", {}).get("heatmap_runs", []) or [])
    by_run = OrderedDict()
    for r in rows:
        by_run.setdefault(r["run_id"], []).append(r)
    runs = {r["run_id"]: r for r in res.runs}
    if not wanted:
        fr = [metric(runs[i], "exact_frac") for i in by_run if i in runs and metric(runs[i], "exact_frac")]
        target = statistics.median(fr) if fr else None
        per_method = OrderedDict()
        for rid in by_run:
            run = runs.get(rid)
            m = by_run[rid][0]["method"]
            x = metric(run, "exact_frac") if run else None
            d = abs(math.log(x / target)) if (x and target) else float("inf")
            # among runs at the same budget (a search-effort sweep), the method's best at that budget
            e = metric(run, metric_name) if run else None
            e = e if e is not None else float("inf")
            if m not in per_method or d < per_method[m][0] - 1e-9 or \
                    (abs(d - per_method[m][0]) <= 1e-9 and e < per_method[m][1]):
                per_method[m] = (d, e, rid)
        wanted = [rid for _, _, rid in per_method.values()][:max_panels]
        if len(per_method) == 1:  # one method swept: up to 4 of its runs, spread over its budgets
            mine = sorted((metric(runs[i], "exact_frac") or 0.0, j, i) for j, i in enumerate(by_run) if i in runs)
            if len(mine) > 1:
                n = min(4, len(mine))
                picks = sorted({round(q * (len(mine) - 1) / (n - 1)) for q in range(n)})
                wanted = [mine[q][2] for q in picks]
    panels = []
    for rid in wanted:
        if rid not in by_run:
            continue
        rr = by_run[rid]
        layers = sorted({r["layer"] for r in rr})
        heads = sorted({r["q_head"] for r in rr})
        val = {(r["layer"], r["q_head"]): r[metric_name] for r in rr}
        run = runs.get(rid, {"method": rr[0]["method"], "params": rr[0]["params"]})
        panels.append({"run_id": rid, "method": rr[0]["method"],
                       "label": res.short_label(run, False) if rid in runs else "",
                       "exact_frac": metric(run, "exact_frac"), "layers": layers, "q_heads": heads,
                       "values": [[val.get((l, h)) for h in heads] for l in layers]})
    if not panels:
        return None
    return {"metric": metric_name, "panels": panels}


# ----------------------------------------------------------------------------------------------------
# 8. attention sparsity heatmap from `retro-bench inspect --json` (RetroInfer Fig. 4a)

@figure("sparsity_heatmap", "Attention sparsity: tokens holding 90% of the mass, per layer and query head",
        needs="a `retro-bench inspect TRACE --json FILE` output in the results directory or given with --inspect",
        size=(style.COLUMN_W, None), paper="RetroInfer Fig. 4(a)")
def sparsity_heatmap(res, field="n90"):
    # the inspect output with the most heads (several traces: the one with the most layers)
    objs = sorted(res.extras["inspect"], key=lambda o: -len(o.get("heads", [])))
    for obj in objs:
        heads = [h for h in obj.get("heads", []) if h.get(field) is not None]
        if not heads:
            continue
        layers = sorted({h["layer"] for h in heads})
        qh = sorted({h["q_head"] for h in heads})
        val = {(h["layer"], h["q_head"]): h[field] for h in heads}
        frac = {(h["layer"], h["q_head"]): h.get("f90") for h in heads}
        info = obj.get("info", {})
        return {"field": field, "trace": obj.get("trace"), "n_tokens": info.get("n_tokens"),
                "prompt_len": info.get("prompt_len"), "layers": layers, "q_heads": qh,
                "values": [[val.get((l, h)) for h in qh] for l in layers],
                "frac": [[frac.get((l, h)) for h in qh] for l in layers]}
    return None


# ----------------------------------------------------------------------------------------------------
# 9. recall vs. scanned keys from run records (RetrievalAttention Fig. 6, Q to K side)

SEARCH_PARAMS = ("search_L", "nprobe", "ef_search", "ef", "n_probe", "efSearch")


def _group(run, per_query_metric):
    """Query heads per KV head, from the sample counts: `scan_ops` is recorded per (KV head, step) and
    counts the inner products of the whole GQA group (docs/metrics.md), accuracy metrics per (query
    head, step). scan_ops / group = keys scanned per query head, as a fraction of the context."""
    a = (run.get("metrics", {}).get(per_query_metric) or {}).get("count")
    b = (run.get("metrics", {}).get("scan_ops") or {}).get("count")
    return max(1, round(a / b)) if a and b else 1


@figure("recall_scanned", "Recall vs. scanned keys as the search effort grows (decode queries)",
        needs="runs of an index method sweeping its search effort (search_L / nprobe / ef_search) with scan_ops",
        size=(style.COLUMN_W, 1.9), paper="RetrievalAttention Fig. 6 (Q to K)")
def recall_scanned(res):
    rk = res.recall_metric(100)
    if not rk:
        return None
    series = []
    for m in res.methods():
        knobs = [p for p in res.varying_params(m) if p in SEARCH_PARAMS]
        if not knobs:
            continue
        knob = knobs[0]
        groups = OrderedDict()   # runs that differ only in the search knob
        for r in res.runs_of(m):
            if knob in r["params"] and metric(r, "scan_ops") is not None and metric(r, rk) is not None:
                groups.setdefault(_key(r["params"], (knob,)), []).append(r)
        for g in groups.values():
            if len(g) < 2:
                continue
            g.sort(key=lambda r: r["params"][knob])
            series.append({"method": m, "param": knob,
                           "label": res.short_label(g[0], False).replace(f"{knob}={fmt_value(g[0]['params'][knob])}", "").strip(),
                           "points": [{"x": metric(r, "scan_ops") / _group(r, rk), "scan_ops": metric(r, "scan_ops"),
                                       "group": _group(r, rk), "y": metric(r, rk), "setting": r["params"][knob],
                                       "run_id": r["run_id"]} for r in g]})
    if not series:
        return None
    return {"recall_metric": rk, "series": series}


# ----------------------------------------------------------------------------------------------------
# 10. index build time per method (CTKVR Fig. 8 / Table 9, RetroInfer §5)

@figure("build_time", "Index build time per method",
        needs="runs of at least two methods that build an index (build_ms > 0.1 ms)",
        size=(style.COLUMN_W, 1.7), paper="CTKVR Fig. 8 / Table 9 style")
def build_time(res):
    rows = []
    for m in res.methods():
        vals = [(metric(r, "build_ms"), r) for r in res.runs_of(m) if (metric(r, "build_ms") or 0) > 0.1]
        if not vals:
            continue
        vals.sort(key=lambda v: v[0])
        med = vals[len(vals) // 2]
        rows.append({"method": m, "median_ms": med[0], "min_ms": vals[0][0], "max_ms": vals[-1][0],
                     "runs": len(vals), "median_run": med[1]["run_id"]})
    if len(rows) < 2:
        return None
    return {"methods": rows}


# ----------------------------------------------------------------------------------------------------
# 11. GPU block cache (RetroInfer §4.3 / Fig. 15)

@figure("cache", "GPU block cache: hit ratio and PCIe traffic vs. cache size and policy",
        needs="runs with the cache_hit metric at two or more cache sizes (a config whose \"system\" sweeps \"cache\")",
        size=(style.COLUMN_W, 1.75), paper="RetroInfer §4.3 / Fig. 15")
def cache(res):
    groups = OrderedDict()
    for r in res.runs:
        sy = r.get("system", {})
        if "cache" not in sy or r["method"] == "full":
            continue
        key = (r["method"], _key(r["params"]), str(sy.get("policy", "lru")))
        groups.setdefault(key, []).append(r)
    series = []
    for (m, _, policy), g in groups.items():
        if len({r["system"]["cache"] for r in g}) < 2 or not any(metric(r, "cache_hit") is not None for r in g):
            continue
        g.sort(key=lambda r: r["system"]["cache"])
        series.append({"method": m, "policy": policy,
                       "points": [{"cache": r["system"]["cache"], "hit": metric(r, "cache_hit"),
                                   "h2d": metric(r, "h2d_bytes"), "fetch": metric(r, "fetch_bytes"),
                                   "run_id": r["run_id"]} for r in g]})
    if not series:
        return None
    full = [metric(r, "h2d_bytes") for r in res.runs_of("full")
            if r["params"].get("offloaded") and (metric(r, "h2d_bytes") or 0) > 0]
    return {"series": series, "full_h2d": full[0] if full else None,
            "methods": sorted({s["method"] for s in series})}


# ----------------------------------------------------------------------------------------------------
# 12. decode throughput vs. batch size from the cost model (RetroInfer Fig. 12)

@figure("throughput", "Modeled decode throughput vs. batch size per context length",
        needs="run records with a throughput table (a config with \"system\": {\"throughput\": {...}})",
        size=(style.WIDE_W, 1.85), paper="RetroInfer Fig. 12 (a-c)")
def throughput(res):
    runs = [r for r in res.runs if isinstance(r.get("throughput"), dict) and r["throughput"].get("rows")]
    if not runs:
        return None
    contexts = sorted({row["context"] for r in runs for row in r["throughput"]["rows"]})
    series, seen = [], {}
    for r in runs:
        t = r["throughput"]
        m = r["method"]
        by = {}
        for N in contexts:
            pts = sorted([row["batch"], row["tokens_per_s"]] for row in t["rows"]
                         if row["context"] == N and not row.get("oom") and row.get("tokens_per_s") is not None)
            by[str(N)] = pts
        series.append({"method": m, "variant": seen.get(m, 0), "label": res.short_label(r, False),
                       "run_id": r["run_id"], "by_context": by, "max_batch": t.get("max_batch", {}),
                       "best": t.get("best", {})})
        seen[m] = seen.get(m, 0) + 1
    return {"model": runs[0]["throughput"].get("model"), "hardware": runs[0]["throughput"].get("hardware"),
            "contexts": contexts, "series": series}


# ----------------------------------------------------------------------------------------------------
# 13. cumulative attention vs. centroid rank, with the centroid estimate and the oracle ranking
#     (`retro-bench centroid-rank TRACE --json FILE`; RetroInfer Fig. 7 style)

@figure("centroid_rank", "Cumulative attention vs. wave cluster rank: true, centroid estimate, oracle ranking",
        needs="a centroid-rank JSON file in the results directory (retro-bench centroid-rank TRACE --json FILE)",
        size=(style.COLUMN_W, 2.0), paper="RetroInfer Fig. 7 style")
def centroid_rank(res):
    series, info = [], {}
    for obj in res.extras["centroid_rank"]:
        for k in ("clusters", "clustered", "prompt_len", "trace", "queries_per_head"):
            if k in obj and k not in info:
                info[k] = obj[k]
        for s in obj.get("series", []):
            xs, ys = s.get("rank"), s.get("cum_attention", s.get("cumulative_attention"))
            if isinstance(xs, list) and isinstance(ys, list) and xs:
                series.append({"label": str(s.get("label", s.get("method", "centroids"))),
                               "kind": s.get("kind", "true"),
                               "method": s.get("method", WAVE), "points": [[x, y] for x, y in zip(xs, ys)]})
    if not series:
        return None
    out = {"series": series}
    out.update(info)
    m = info.get("clusters")
    if m:  # the wave defaults' zones (retrieval 1.8%, + estimation 23.2%) as cluster ranks
        r = max(1, round(m * WAVE_DEFAULTS["retrieval"]))
        out["zones"] = [{"label": "retrieval zone (1.8%)", "rank": r},
                        {"label": "+ estimation zone (23.2%)",
                         "rank": r + round(m * WAVE_DEFAULTS["estimation"])}]
    return out


# ====================================================================================================
# drawing (matplotlib imported by the caller; nothing here reads results)

def _mantissa(v):
    return round(v / 10 ** math.floor(math.log10(v) + 1e-9)) if v > 0 else 0


def _pct_axis(ax, axis="x", log=True):
    """Plain-number tick labels (0.1, 1, 10); on a log axis spanning less than two decades the 2 and 5
    minor ticks are labelled too. Call after plotting (reads the data limits)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    a = ax.xaxis if axis == "x" else ax.yaxis
    if log:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        a.set_major_locator(LogLocator(base=10, numticks=12))
        lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
        import matplotlib as mpl
        # minor ticks are shorter: pad their labels so they line up with the major ones
        k = "xtick" if axis == "x" else "ytick"
        ax.tick_params(axis=axis, which="minor", pad=mpl.rcParams[f"{k}.major.pad"] +
                       mpl.rcParams[f"{k}.major.size"] - mpl.rcParams[f"{k}.minor.size"])
        if lo > 0 and hi / lo < 10:  # under a decade: label every minor tick (2, 3, 4, ...)
            a.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:.2g}"))
        elif lo > 0 and hi / lo < 100:
            a.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if _mantissa(v) in (2, 5) else ""))
        else:
            a.set_minor_formatter(NullFormatter())
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def _legend_above(fig, handles, labels, ncol=None, y=1.0):
    if not handles:
        return
    ncol = ncol or min(len(handles), 4)
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, y), ncol=ncol, frameon=False,
               borderaxespad=0.0)


def _variant_style(i):
    """Within one method: variants keep the colour and marker; line style and fill tell them apart."""
    ls = ["-", "--", ":", "-."][i % 4]
    filled = i % 2 == 0
    return ls, filled


def _method_line(ax, xs, ys, method, label=None, variant=0, **kw):
    st = style.method_style(method)
    ls, filled = _variant_style(variant)
    return ax.plot(xs, ys, ls, color=st["color"], marker=st["marker"], label=label or st["name"],
                   markerfacecolor=st["color"] if filled else "white", markeredgecolor=st["color"],
                   markeredgewidth=0.8, **kw)[0]


def _ylim_metric(ax, met, values):
    vals = [v for v in values if v is not None]
    if met.startswith("recall@") or met in ("mass", "out_cos"):
        lo = min(vals) if vals else 0
        ax.set_ylim(max(0.0, min(lo - 0.05, 0.0 if lo < 0.3 else lo - 0.1)), 1.02)
    elif met == "out_err":
        hi = max(vals) if vals else 1
        ax.set_ylim(0, hi * 1.08 if hi > 0 else 1)


@drawer("accuracy_budget")
def _draw_accuracy_budget(s, fig):
    n = len(s["panels"])
    axes = fig.subplots(1, n, squeeze=False)[0]
    handles = OrderedDict()
    scale = style.metric_scale(s["x_metric"])
    for ax, p in zip(axes, s["panels"]):
        met = p["metric"]
        allv = []
        for ser in p["series"]:
            xs = [q["x"] * scale for q in ser["points"]]
            ys = [q["y"] for q in ser["points"]]
            allv += ys
            h = _method_line(ax, xs, ys, ser["method"], ms=3.5)
            handles.setdefault(style.method_style(ser["method"])["name"], h)
            if ser["dominated"]:
                st = style.method_style(ser["method"])
                ax.plot([q["x"] * scale for q in ser["dominated"]], [q["y"] for q in ser["dominated"]],
                        ls="none", marker=st["marker"], ms=2.5, color=st["color"], alpha=0.35)
        ref = s.get("reference")
        if ref and ref["y"].get(met) is not None:
            st = style.method_style("full")
            h = ax.plot([ref["x"] * scale], [ref["y"][met]], ls="none", marker=st["marker"], ms=6, clip_on=False,
                        color=st["color"], label=st["name"])[0]
            handles.setdefault(st["name"], h)
            allv.append(ref["y"][met])
        _pct_axis(ax, "x")
        ax.set_xlabel(style.metric_label(s["x_metric"]))
        ax.set_title(style.metric_short(met))
        _ylim_metric(ax, met, allv)
    fig.tight_layout(pad=0.3, w_pad=1.0)
    _legend_above(fig, list(handles.values()), list(handles.keys()), ncol=len(handles))


@drawer("ood_recall")
def _draw_ood_recall(s, fig):
    n = len(s["panels"])
    axes = fig.subplots(1, n, squeeze=False, sharey=True)[0]
    handles = OrderedDict()
    for ax, p in zip(axes, s["panels"]):
        for ser in p["series"]:
            base, _, suffix = ser["index"].partition(" (")
            st = style.method_style(base)
            label = st["name"] + (f" ({suffix}" if suffix else "")
            xs = [100 * x for x, _ in ser["points"]]
            ys = [y for _, y in ser["points"]]
            h = ax.plot(xs, ys, "--" if suffix else "-", color=st["color"], marker=st["marker"], ms=3,
                        mfc="white" if suffix else st["color"], label=label)[0]
            handles.setdefault(label, h)
        _pct_axis(ax, "x")
        ax.set_title(p["title"])
        ax.set_xlabel("Scanned keys (%)")
        ax.set_ylim(0, 1.02)
    axes[0].set_ylabel(f"Recall@{s['k']}")
    fig.tight_layout(pad=0.3, w_pad=0.8)
    _legend_above(fig, list(handles.values()), list(handles.keys()))


_SHORT_Y = {"mass": "Mass ↑", "out_err": "Output err. ↓",
            "model_us": "Modeled attn.\nthroughput\n(layer steps/ms) ↑"}


@drawer("zone_sweeps")
def _draw_zone_sweeps(s, fig):
    import numpy as np
    mets = s["metrics"] + ([s["system_metric"]] if s.get("system_metric") else [])
    ncol = len(s["panels"])
    axes = fig.subplots(len(mets), ncol, squeeze=False, sharex="col", sharey="row")
    st = style.method_style(WAVE)
    for j, p in enumerate(s["panels"]):
        pts = p["points"]
        cat = p["axis"] == "steady"
        xs = list(range(len(pts))) if cat else [100 * q["x"] for q in pts]
        for i, met in enumerate(mets):
            ax = axes[i][j]
            ys = [q["y"].get(met) for q in pts]
            if met == "model_us":  # modeled attention throughput: layer decode steps per ms at batch 1
                ys = [None if not y else 1000.0 / y for y in ys]
            ax.plot(xs, [np.nan if y is None else y for y in ys], "-", color=st["color"], marker=st["marker"], ms=3.5)
            for x, q, y in zip(xs, pts, ys):
                if q["is_centre"] and y is not None:
                    ax.plot([x], [y], ls="none", marker="o", ms=7, mfc="none", mec="#D55E00", mew=1.0)
            if j == 0:
                ax.set_ylabel(_SHORT_Y.get(met, style.metric_short(met)), fontsize=7)
            if cat:
                ax.set_xticks(xs)
                ax.set_xticklabels([q["x"] for q in pts], fontsize=6.5)
                ax.set_xlim(-0.4, len(pts) - 0.6)
            else:
                _pct_axis(ax, "x", log=p["axis"] == "retrieval")
                if p["axis"] == "retrieval":
                    from matplotlib.ticker import FixedLocator, NullLocator
                    ax.xaxis.set_major_locator(FixedLocator(xs))
                    ax.xaxis.set_minor_locator(NullLocator())
            if i == len(mets) - 1:
                ax.set_xlabel(p["xlabel"])
        for i, met in enumerate(mets):
            if met == "model_us":
                axes[i][0].set_ylim(bottom=0)
            else:
                _ylim_metric(axes[i][0], met, [q["y"][met] for pp in s["panels"] for q in pp["points"]])
    from matplotlib.lines import Line2D
    c = s["centre"]
    handles = [Line2D([], [], color=st["color"], marker=st["marker"], ms=3.5, label=st["name"]),
               Line2D([], [], ls="none", marker="o", ms=7, mfc="none", mec="#D55E00", mew=1.0,
                      label=f"sweep centre ({c.get('sink')}+{c.get('window')}, "
                            f"{style.pct_label(float(c['retrieval']))}, {style.pct_label(float(c['estimation']))})"
                      if all(k in c for k in ("sink", "window", "retrieval", "estimation")) else "sweep centre")]
    fig.tight_layout(pad=0.3, h_pad=0.4, w_pad=0.8)
    _legend_above(fig, handles, [h.get_label() for h in handles], ncol=2)


@drawer("estimation")
def _draw_estimation(s, fig):
    import numpy as np
    mets = s["metrics"]
    axes = fig.subplots(1, len(mets), squeeze=False)[0]
    st = style.method_style(WAVE)
    nv = len(s["variants"])
    width = 0.8 / nv
    x = np.arange(len(s["retrieval"]))
    handles = OrderedDict()
    import matplotlib.colors as mc
    base = mc.to_rgb(st["color"])
    nfill = sum(1 for v in s["variants"] if v["estimation"] != 0)

    def shade(j):  # j-th estimation budget (ascending): light to the full method colour
        t = 1.0 if nfill <= 1 else 0.3 + 0.7 * j / (nfill - 1)
        return tuple(1 - (1 - c) * t for c in base)
    for ax, met in zip(axes, mets):
        allv = []
        j = 0
        for i, v in enumerate(s["variants"]):
            ys = [np.nan if y is None else y for y in v["y"][met]]
            allv += [y for y in v["y"][met] if y is not None]
            filled = v["estimation"] != 0
            h = ax.bar(x + (i - (nv - 1) / 2) * width, ys, width * 0.92, color=shade(j) if filled else "white",
                       edgecolor=st["color"], hatch=None if filled else "////", linewidth=0.8, label=v["label"])
            j += 1 if filled else 0
            handles.setdefault(v["label"], h)
        for r in s["references"]:
            rs = style.method_style(r["method"])
            y = r["y"].get(met)
            if y is None:
                continue
            allv.append(y)
            lab = f"{rs['name']} ({100 * r['exact_frac']:.2g}% exact)"
            h = ax.axhline(y, color=rs["color"], ls="--", lw=1.0, label=lab)
            handles.setdefault(lab, h)
        ax.set_xticks(x)
        # a retrieval budget is a fraction of the clusters (< 1) or a cluster count (>= 1); under it the
        # exact tokens it amounts to (mean over the variants), the x of the other figures
        ex = []
        for j in range(len(s["retrieval"])):
            e = [v["exact_frac"][j] for v in s["variants"] if v["exact_frac"][j] is not None]
            ex.append(statistics.mean(e) if e else None)
        counts = all(r >= 1 for r in s["retrieval"])
        ax.set_xticklabels([(f"{r:g}" if r >= 1 else style.pct_label(r)) +
                            (f"\n({100 * e:.2g}%)" if e is not None else "")
                            for r, e in zip(s["retrieval"], ex)], fontsize=6.5)
        ax.set_xlabel("Retrieval zone, " + ("clusters" if counts else "% of clusters") +
                      "\n(exact tokens, % of context)", fontsize=7)
        ax.set_title(style.metric_short(met))
        ax.grid(axis="x", visible=False)
        # bars start at 0
        ax.set_ylim(0, max(1.02, max(allv) * 1.05) if met != "out_err" else max(allv) * 1.1)
        if len(x) == 1:
            ax.set_xlim(-1.0, 1.0)
    fig.tight_layout(pad=0.3, w_pad=1.0)
    _legend_above(fig, list(handles.values()), list(handles.keys()), ncol=min(len(handles), 4))


@drawer("segments")
def _draw_segments(s, fig):
    ax = fig.subplots(1, 1)
    st = style.method_style(WAVE)
    ys_all = []
    for i, v in enumerate(s["variants"]):
        xs = [p["build_ms"] / 1000.0 for p in v["points"]]
        ys = [p["recall"] for p in v["points"]]
        ys_all += ys
        _method_line(ax, xs, ys, WAVE, label=v["label"], variant=i, ms=4)
        for p, x, y in zip(v["points"], xs, ys):
            ax.annotate(p["segment_label"], (x, y), textcoords="offset points",
                        xytext=(0, 5 if i == 0 else -9), ha="center", fontsize=6, color=st["color"])
    lo, hi = min(ys_all), max(ys_all)
    mid, span = (lo + hi) / 2, max(hi - lo, 0.1)
    ax.set_ylim(mid - 0.75 * span, mid + 0.75 * span)
    ax.set_xscale("log")
    from matplotlib.ticker import FuncFormatter
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if _mantissa(v) in (2, 5) else ""))
    ax.set_xlabel("Index build time (s per KV head, this CPU)")
    ax.set_ylabel(style.metric_label(s["recall_metric"]))
    fig.tight_layout(pad=0.3)
    h, l = ax.get_legend_handles_labels()
    _legend_above(fig, h, l, ncol=1)


SMOOTH = 5  # per-step accuracy in the updates figure: centred mean over this many sampled steps


def _smooth(ys, w):
    """Centred moving mean over w samples (None skipped; shorter windows at the ends)."""
    out = []
    for i in range(len(ys)):
        win = [y for y in ys[max(0, i - w // 2):i + w // 2 + 1] if y is not None]
        out.append(sum(win) / len(win) if win and ys[i] is not None else None)
    return out


@drawer("updates")
def _draw_updates(s, fig):
    mets = [m for m in s["metrics"] if m != "gpu_bytes"] + ["gpu_bytes"]
    axes = fig.subplots(1, len(mets), squeeze=False)[0]
    handles = OrderedDict()
    for ax, met in zip(axes, mets):
        sc = style.metric_scale(met)
        i = 0
        for v in s["variants"]:
            if met not in v["y"]:
                continue
            ys = [None if y is None else y * sc for y in v["y"][met]]
            if met != "gpu_bytes":
                ys = _smooth(ys, SMOOTH)
            if v["method"] == "full":
                st = style.method_style("full")
                h = ax.plot(v["steps"], ys, "-", color=st["color"], lw=1.0, label=v["label"])[0]
            else:
                h = _method_line(ax, v["steps"], ys, v["method"], label=v["label"], variant=i, ms=2.5, markevery=4)
                i += 1
            handles.setdefault(v["label"], h)
        ax.set_xlabel("Decode step")
        ax.set_title(style.metric_short(met) + f" ({SMOOTH}-sample mean)" if met != "gpu_bytes"
                     else "GPU memory (MiB per KV head) ↓", fontsize=7.5)
        if met != "gpu_bytes":
            _ylim_metric(ax, met, [y for v in s["variants"] if met in v["y"] for y in v["y"][met]])
        else:
            ax.set_ylim(bottom=0)
    fig.tight_layout(pad=0.3, w_pad=1.0)
    _legend_above(fig, list(handles.values()), list(handles.keys()))


def _heat(ax, values, layers, heads, cmap, norm):
    import numpy as np
    a = np.array([[np.nan if v is None else v for v in row] for row in values], dtype=float)
    im = ax.imshow(a, aspect="auto", cmap=cmap, norm=norm, interpolation="nearest")
    ax.set_yticks(range(len(layers)))
    ax.set_yticklabels([str(l) for l in layers])
    step = max(1, len(heads) // 8)
    ax.set_xticks(range(0, len(heads), step))
    ax.set_xticklabels([str(h) for h in heads[::step]])
    ax.grid(False)
    for sp in ax.spines.values():
        sp.set_visible(False)
    return im


def heatmap_size(s):
    if "panels" in s:  # head_heatmap: one row per (run, layer)
        rows = sum(len(p["layers"]) for p in s["panels"])
        return (style.COLUMN_W, min(6.0, max(1.3, 0.75 + rows * 0.17)))
    return (style.COLUMN_W, min(6.0, max(1.25, 0.9 + len(s["layers"]) * 0.2)))


@drawer("head_heatmap")
def _draw_head_heatmap(s, fig):
    from matplotlib.colors import Normalize
    panels = s["panels"]
    multi_layer = any(len(p["layers"]) > 1 for p in panels)
    rows, labels, bounds = [], [], []
    heads = sorted({h for p in panels for h in p["q_heads"]})
    dup = len({p["method"] for p in panels}) < len(panels)  # several runs of one method: name the run
    one = len({p["method"] for p in panels}) == 1 and len(panels) > 1  # one method: its name as the title
    toks = [(p.get("label") or "").split() for p in panels]
    common = set.intersection(*(set(t) for t in toks)) if toks else set()
    for p, tk in zip(panels, toks):
        name = "" if one else style.method_style(p["method"])["name"]
        if dup:  # only the parameters that differ between the runs shown
            name = (name + " " + " ".join(t for t in tk if t not in common and t != "defaults")).strip()
        ef = f" ({100 * p['exact_frac']:.2g}% exact)" if p.get("exact_frac") else ""
        for li, l in enumerate(p["layers"]):
            val = dict(zip(p["q_heads"], p["values"][li]))
            rows.append([val.get(h) for h in heads])
            labels.append(f"{name}{ef}" + (f" L{l}" if multi_layer else ""))
        bounds.append(len(rows))
    ax = fig.subplots(1, 1)
    vals = [v for r in rows for v in r if v is not None]
    norm = Normalize(0.0, max(vals) if vals else 1.0)
    im = _heat(ax, rows, labels, heads, "magma_r", norm)
    ax.set_yticklabels([l.strip() for l in labels], fontsize=6.5)
    if one:
        ax.set_title(style.method_style(panels[0]["method"])["name"], fontsize=7.5, loc="left")
    for b in bounds[:-1]:
        ax.axhline(b - 0.5, color="white", lw=2.0)
    ax.set_xlabel("Query head")
    fig.tight_layout(pad=0.3)
    cb = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
    cb.set_label("Output error", fontsize=7)
    cb.ax.tick_params(labelsize=6)


@drawer("sparsity_heatmap")
def _draw_sparsity_heatmap(s, fig):
    from matplotlib.colors import LogNorm
    ax = fig.subplots(1, 1)
    vals = [v for row in s["values"] for v in row if v]
    norm = LogNorm(max(1.0, min(vals)), max(vals)) if vals else None
    im = _heat(ax, s["values"], s["layers"], s["q_heads"], "viridis", norm)
    ax.set_ylabel("Layer")
    ax.set_xlabel("Query head")
    if s.get("n_tokens"):
        ax.set_title(f"{s['trace'].rsplit('/', 1)[-1]} ({s['n_tokens']} tokens)", fontsize=7, loc="left")
    fig.tight_layout(pad=0.3)
    cb = fig.colorbar(im, ax=ax, fraction=0.05, pad=0.02)
    cb.set_label("Tokens for\n90% of mass", fontsize=7)
    cb.ax.tick_params(labelsize=6)


@drawer("recall_scanned")
def _draw_recall_scanned(s, fig):
    ax = fig.subplots(1, 1)
    seen = {}
    for ser in s["series"]:
        st = style.method_style(ser["method"])
        v = seen.get(ser["method"], 0)
        seen[ser["method"]] = v + 1
        lab = st["name"] + f" ({ser['param']})" + (f" {ser['label']}" if ser["label"] and v else "")
        xs = [100 * p["x"] for p in ser["points"]]
        _method_line(ax, xs, [p["y"] for p in ser["points"]], ser["method"], label=lab, variant=v, ms=3.5)
    _pct_axis(ax, "x")
    ax.set_xlabel("Scanned keys per query head (% of context)")
    ax.set_ylabel(style.metric_label(s["recall_metric"]))
    ax.set_ylim(0, 1.02)
    fig.tight_layout(pad=0.3)
    h, l = ax.get_legend_handles_labels()
    _legend_above(fig, h, l, ncol=2)


@drawer("build_time")
def _draw_build_time(s, fig):
    ax = fig.subplots(1, 1)
    rows = s["methods"]
    ys = list(range(len(rows)))[::-1]
    for y, r in zip(ys, rows):
        st = style.method_style(r["method"])
        ax.barh(y, r["median_ms"] / 1000.0, color=st["color"], height=0.65)
        if r["max_ms"] > r["min_ms"]:
            ax.plot([r["min_ms"] / 1000.0, r["max_ms"] / 1000.0], [y, y], color="black", lw=0.8)
    ax.set_yticks(ys)
    ax.set_yticklabels([style.method_style(r["method"])["name"] for r in rows])
    ax.set_xscale("log")
    ax.set_xlabel("Index build time (s per KV head)")
    ax.grid(axis="y", visible=False)
    fig.tight_layout(pad=0.3)


_POLICY = {"lru": ("o", "-", 1.0), "lfu": ("s", "--", 0.75), "fifo": ("^", ":", 0.55), "clock": ("v", "-.", 0.4),
           "belady": ("*", (0, (4, 1.5)), None)}


def _policy_style(method, policy):
    import matplotlib.colors as mc
    st = style.method_style(method)
    marker, ls, shade = _POLICY.get(policy, ("D", "-", 0.7))
    if shade is None:
        color = "#333333"  # Belady: the offline optimum, a reference
    else:
        base = mc.to_rgb(st["color"])
        color = tuple(1 - (1 - c) * (0.35 + 0.65 * shade) for c in base)
    return color, marker, ls


@drawer("cache")
def _draw_cache(s, fig):
    ax1, ax2 = fig.subplots(1, 2)
    handles = OrderedDict()
    multi = len(s["methods"]) > 1
    for ser in s["series"]:
        color, marker, ls = _policy_style(ser["method"], ser["policy"])
        pol = "Belady (offline opt.)" if ser["policy"] == "belady" else ser["policy"].upper()
        lab = (style.method_style(ser["method"])["name"] + " " if multi else "") + pol
        pts = ser["points"]
        hp = [p for p in pts if p["hit"] is not None]
        # LRU (the paper's policy) on top, hollow, so policies that coincide with it leave it visible
        top = {"zorder": 5, "mfc": "white", "ms": 4.2} if ser["policy"] == "lru" else {"ms": 3.2}
        h = ax1.plot([100 * p["cache"] for p in hp], [p["hit"] for p in hp], linestyle=ls, color=color,
                     marker=marker, label=lab, **top)[0]
        handles.setdefault(lab, h)
        if s["full_h2d"]:
            ys = [100 * p["h2d"] / s["full_h2d"] for p in pts]
        else:
            ys = [p["h2d"] / 1024 for p in pts]
        ax2.plot([100 * p["cache"] for p in pts], ys, linestyle=ls, color=color, marker=marker, **top)
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    ticks = sorted({100 * p["cache"] for ser in s["series"] for p in ser["points"]})
    for ax in (ax1, ax2):  # 0 and small caches matter most: linear below 1%, log above
        ax.set_xscale("symlog", linthresh=1.0, linscale=0.6)
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax2.set_ylim(bottom=0)
    ax1.set_xlabel("GPU cache (% of KV)")
    ax1.set_ylabel("Cache hit ratio")
    ax1.set_ylim(0, 1.02)
    ax2.set_xlabel("GPU cache (% of KV)")
    ax2.set_ylabel("PCIe traffic (% of full KV)" if s["full_h2d"] else "Host→GPU (KiB/step/KV head)")
    fig.tight_layout(pad=0.3, w_pad=1.0)
    _legend_above(fig, list(handles.values()), list(handles.keys()), ncol=3)


_PLAIN_LABEL = {"offloaded=false": "KV on GPU", "offloaded=true": "KV offloaded to CPU"}


@drawer("throughput")
def _draw_throughput(s, fig):
    ctx = s["contexts"]
    axes = fig.subplots(1, len(ctx), squeeze=False, sharey=True)[0]
    handles = OrderedDict()
    for ax, N in zip(axes, ctx):
        for ser in s["series"]:
            pts = ser["by_context"].get(str(N), [])
            if not pts:
                continue
            st = style.method_style(ser["method"])
            sub = _PLAIN_LABEL.get(ser["label"], ser["label"])
            lab = st["name"] + (f" ({sub})" if sub and sub != "defaults" else "")
            h = _method_line(ax, [p[0] for p in pts], [p[1] for p in pts], ser["method"], label=lab,
                             variant=ser["variant"], ms=3)
            handles.setdefault(lab, h)
            mb = ser["max_batch"].get(str(N))
            if mb is not None and pts and pts[-1][0] <= mb < 2 * pts[-1][0]:
                ax.plot([pts[-1][0]], [pts[-1][1]], ls="none", marker="x", color=st["color"], ms=5, mew=1.0)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        from matplotlib.ticker import FuncFormatter
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("Batch size")
        ax.set_title(f"{style.tokens_label(N) if N % 1024 == 0 else f'{N // 1000}K'} context")
    axes[0].set_ylabel("Decode throughput (tokens/s)")
    from matplotlib.lines import Line2D
    handles["largest batch that fits in GPU memory"] = Line2D([], [], ls="none", marker="x", color="#444444",
                                                              ms=5, mew=1.0)
    fig.tight_layout(pad=0.3, w_pad=0.8)
    _legend_above(fig, list(handles.values()), list(handles.keys()), ncol=min(len(handles), 3))


@drawer("centroid_rank")
def _draw_centroid_rank(s, fig):
    ax = fig.subplots(1, 1)
    look = {"true": ("-", None), "estimate": ("--", "white"), "oracle": (":", None)}
    for ser in s["series"]:
        st = style.method_style(ser.get("method", WAVE))
        ls, mfc = look.get(ser.get("kind"), ("-", None))
        pts = ser["points"]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle=ls, color=st["color"], marker=st["marker"],
                ms=2.8, markevery=max(1, len(pts) // 10), mfc=mfc or st["color"], mec=st["color"],
                label=ser["label"])
    for z, c in zip(s.get("zones", []), ("#555555", "#999999")):
        ax.axvline(z["rank"], color=c, lw=0.8, ls=(0, (2, 2)), zorder=0)
        ax.annotate(z["label"].replace(" zone (", "\n("), (z["rank"], 0.985), xycoords=("data", "axes fraction"),
                    fontsize=5.8, color=c, ha="center", va="top",
                    bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none"})
    if s.get("clustered"):
        ax.axhline(s["clustered"], color="#BBBBBB", lw=0.8, zorder=0)
        ax.annotate("all clusters", (1.0, s["clustered"]), xycoords=("axes fraction", "data"), fontsize=5.8,
                    color="#888888", ha="right", va="bottom")
    ax.set_xscale("log")
    from matplotlib.ticker import FuncFormatter
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("Clusters, by rank" + (f" (of {s['clusters']})" if s.get("clusters") else ""))
    ax.set_ylabel("Cumulative attention\n(share of full attention)")
    ax.set_ylim(0, 1.02 if not s.get("clustered") else min(1.02, max(0.3, s["clustered"] * 1.35)))
    fig.tight_layout(pad=0.3)
    h, l = ax.get_legend_handles_labels()
    _legend_above(fig, h, l, ncol=1)


def figure_size(fig_def, series):
    w, h = fig_def.size
    if h is None:
        w, h = heatmap_size(series)
    elif callable(h):
        h = h(series)
    return w, h


def render(fig_def, series):
    """A matplotlib Figure drawn from `series` (matplotlib must be importable)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: F401  (registers the Agg canvas)
    from matplotlib.figure import Figure as MplFigure
    style.apply_rc()
    fig = MplFigure(figsize=figure_size(fig_def, series))
    fig_def.draw(series, fig)
    return fig
