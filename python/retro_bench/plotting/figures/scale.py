"""Cost growth with the context (configs/paper/scale-1m.json, issue 17): index build per KV head and
select / attention per decode step vs. tokens, log-log, with n and n^2 reference slopes."""
import math
from collections import OrderedDict

from .. import style
from ..results import metric
from .common import WAVE
from .drawing import legend_above, method_line
from .registry import drawer, figure

PHASES = (("build_ms", "Index build (s per KV head)", 1e-3),
          ("select_us", "Select per step (ms per GQA group)", 1e-3),
          ("attend_us", "Attention per step (ms per GQA group)", 1e-3))


def loglog_slope(points):
    """Least-squares slope of log(y) against log(x) over the (x, y) points with x, y > 0 (None below two)."""
    pts = [(math.log(x), math.log(y)) for x, y in points if x and y and x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den > 0 else None


@figure("scale", "Cost growth with the context: build and per-step time vs. tokens (log-log)",
        needs="runs of the same method parameters on traces of at least three prompt lengths",
        size=(style.WIDE_W, 2.0), paper="issue 17 (RetroInfer's 1M-token contexts)")
def scale(res):
    series = OrderedDict()
    for r in res.runs:
        P = r.get("prompt_len")
        if not P:
            continue
        key = r.get("label") or r["method"]
        v = series.setdefault(key, {"method": r["method"], "label": key, "params": r.get("params", {}), "points": []})
        v["points"].append({"prompt_len": int(P), "run_id": r["run_id"],
                            **{m: metric(r, m, "p50") for m, _, _ in PHASES}})
    out = []
    for v in series.values():
        v["points"].sort(key=lambda p: p["prompt_len"])
        if len({p["prompt_len"] for p in v["points"]}) < 3:
            continue
        v["slopes"] = {m: loglog_slope([(p["prompt_len"], p[m]) for p in v["points"]]) for m, _, _ in PHASES}
        out.append(v)
    if not out:
        return None
    return {"phases": [m for m, _, _ in PHASES], "series": out}


def short_label(v):
    """A legend entry: the method, and for wave the k-means final assignment that tells its runs apart."""
    p = v["params"]
    if v["method"] == WAVE and "final_assign" in p:
        return f"wave ({p['final_assign']} assign)"
    return style.method_style(v["method"])["name"]


@drawer("scale")
def _draw_scale(s, fig):
    from matplotlib.ticker import NullFormatter
    axes = fig.subplots(1, len(PHASES), squeeze=False)[0]
    handles = OrderedDict()
    variant = OrderedDict()  # series label -> (method, index among the method's series): line style, fill
    for ax, (met, title, sc) in zip(axes, PHASES):
        xs_all, ys_all = [], []
        for v in s["series"]:
            pts = [p for p in v["points"] if p.get(met) and p[met] > (0.1 if met == "build_ms" else 0)]
            if not pts:  # (methods without an index build in well under 0.1 ms)
                continue
            if v["label"] not in variant:
                variant[v["label"]] = (v["method"], sum(1 for m, _ in variant.values() if m == v["method"]))
            xs = [p["prompt_len"] for p in pts]
            ys = [p[met] * sc for p in pts]
            h = method_line(ax, xs, ys, v["method"], label=short_label(v), variant=variant[v["label"]][1], ms=3)
            slope = v["slopes"].get(met)
            if slope is not None:
                ax.annotate(f"{slope:.2f}", (xs[-1], ys[-1]), textcoords="offset points", xytext=(3, 0),
                            fontsize=5.5, color=h.get_color(), va="center")
            handles.setdefault(short_label(v), h)
            xs_all += xs
            ys_all += ys
        if not xs_all:
            continue
        # reference slopes through the panel's geometric centre: n (dashed) and n^2 (dotted)
        x0, x1 = min(xs_all), max(xs_all)
        xm = math.sqrt(x0 * x1)
        ym = math.exp(sum(math.log(y) for y in ys_all) / len(ys_all))
        for power, ls, name in ((1, "--", "∝ n"), (2, ":", "∝ n²")):
            ref = ax.plot([x0, x1], [ym * (x0 / xm) ** power, ym * (x1 / xm) ** power], ls, color="#999999",
                          lw=0.8, label=name)[0]
            handles.setdefault(name, ref)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("Context (tokens)")
        ax.set_title(title, fontsize=7)
        ticks = sorted(set(xs_all))  # the measured contexts, labelled 32K ... 1M
        ax.set_xticks(ticks)
        ax.set_xticklabels([style.tokens_label(int(x)) for x in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())
    fig.tight_layout(pad=0.3)
    legend_above(fig, list(handles.values()), list(handles.keys()), ncol=min(len(handles), 6))
