"""Accuracy vs. budget: the Pareto front per method, and recall vs. scanned keys as search effort grows."""
from collections import OrderedDict

from .. import style
from ..results import metric, fmt_value
from .common import accuracy_metrics, params_key, pareto_front
from .drawing import legend_above, method_line, pct_axis, ylim_metric
from .registry import drawer, figure


# ----------------------------------------------------------------------------------------------------
# accuracy vs. budget (Pareto front per method)

@figure("accuracy_budget", "Accuracy vs. exact-token budget (Pareto front per method)",
        needs="runs of at least two methods (other than full) with exact_frac and recall@k/mass/out_err",
        size=(style.WIDE_W, 1.75), paper="RetroInfer Fig. 12-13 / RetrievalAttention Tab. 2 style")
def accuracy_budget(res):
    methods = [m for m in res.methods() if m != "full"
               and any(metric(r, "exact_frac") is not None for r in res.runs_of(m))]
    if len(methods) < 2:
        return None
    metrics = accuracy_metrics(res)
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
# recall vs. scanned keys from run records (RetrievalAttention Fig. 6, Q to K side)

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
                groups.setdefault(params_key(r["params"], (knob,)), []).append(r)
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


# ====================================================================================================
# drawing (matplotlib imported by the caller; nothing here reads results)


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
            h = method_line(ax, xs, ys, ser["method"], ms=3.5)
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
        pct_axis(ax, "x")
        ax.set_xlabel(style.metric_label(s["x_metric"]))
        ax.set_title(style.metric_short(met))
        ylim_metric(ax, met, allv)
    fig.tight_layout(pad=0.3, w_pad=1.0)
    legend_above(fig, list(handles.values()), list(handles.keys()), ncol=len(handles))


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
        method_line(ax, xs, [p["y"] for p in ser["points"]], ser["method"], label=lab, variant=v, ms=3.5)
    pct_axis(ax, "x")
    ax.set_xlabel("Scanned keys per query head (% of context)")
    ax.set_ylabel(style.metric_label(s["recall_metric"]))
    ax.set_ylim(0, 1.02)
    fig.tight_layout(pad=0.3)
    h, l = ax.get_legend_handles_labels()
    legend_above(fig, h, l, ncol=2)
