"""Index build cost: segment size vs. build time and recall, and build time per method."""
from collections import OrderedDict

from .. import style
from ..results import metric, fmt_value
from .common import WAVE, first_trace_runs, params_key, wave_final_assign
from .drawing import legend_above, mantissa, method_line
from .registry import drawer, figure


# ----------------------------------------------------------------------------------------------------
# segment size vs. build time and recall (RetroInfer Fig. 18b)

@figure("segments", "Segmented clustering: index build time vs. recall per segment size",
        needs="wave runs with at least two segment sizes (otherwise equal parameters)",
        size=(style.COLUMN_W, 2.0), paper="RetroInfer Fig. 18b")
def segments(res):
    runs = first_trace_runs(res, WAVE)
    rk = res.recall_metric(100)
    if not rk:
        return None
    groups = OrderedDict()
    for r in runs:
        p = r["params"]
        if "segment" not in p:
            continue
        groups.setdefault(params_key(p, ("segment", "final_global_assign", "final_assign", "final_radius")),
                          []).append(r)
    best = max(groups.values(), key=lambda g: len({r["params"]["segment"] for r in g}), default=None)
    if not best or len({r["params"]["segment"] for r in best}) < 2:
        return None
    P = res.prompt_len()
    variants = OrderedDict()
    for r in best:
        fa, radius = wave_final_assign(r["params"]), r["params"].get("final_radius")
        probe = r["params"].get("final_probe")
        key = fmt_value(fa) + ("/" + fmt_value(radius) if fa == "local" else "") + \
            ("/" + fmt_value(probe) if fa == "probe" else "")
        variants.setdefault(key, {"final_assign": fa, "final_radius": radius if fa == "local" else None,
                                  "final_probe": probe if fa == "probe" else None,
                                  "points": []})["points"].append(r)
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
        fa = v["final_assign"]
        if fa == "probe":
            label = "probed final assignment (%s lists)" % fmt_value(v["final_probe"])
        else:
            label = {None: "segmented", "global": "with final global assignment",
                     "none": "pure segmented (no global pass)"}.get(
                fa, "local final assignment (±%s segments)" % fmt_value(v["final_radius"]))
        out.append({"final_assign": fa, "final_global_assign": {"global": True, "none": False}.get(fa),
                    "final_radius": v["final_radius"], "label": label, "points": pts})
    return {"recall_metric": rk, "prompt_len": P, "variants": out}


# ----------------------------------------------------------------------------------------------------
# index build time per method (CTKVR Fig. 8 / Table 9, RetroInfer §5)

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


# ====================================================================================================
# drawing (matplotlib imported by the caller; nothing here reads results)


@drawer("segments")
def _draw_segments(s, fig):
    ax = fig.subplots(1, 1)
    st = style.method_style(WAVE)
    ys_all = []
    for i, v in enumerate(s["variants"]):
        xs = [p["build_ms"] / 1000.0 for p in v["points"]]
        ys = [p["recall"] for p in v["points"]]
        ys_all += ys
        method_line(ax, xs, ys, WAVE, label=v["label"], variant=i, ms=4)
        for p, x, y in zip(v["points"], xs, ys):
            ax.annotate(p["segment_label"], (x, y), textcoords="offset points",
                        xytext=(0, 5 if i == 0 else -9), ha="center", fontsize=6, color=st["color"])
    lo, hi = min(ys_all), max(ys_all)
    mid, span = (lo + hi) / 2, max(hi - lo, 0.1)
    ax.set_ylim(mid - 0.75 * span, mid + 0.75 * span)
    ax.set_xscale("log")
    from matplotlib.ticker import FuncFormatter
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if mantissa(v) in (2, 5) else ""))
    ax.set_xlabel("Index build time (s per KV head, this CPU)")
    ax.set_ylabel(style.metric_label(s["recall_metric"]))
    fig.tight_layout(pad=0.3)
    h, l = ax.get_legend_handles_labels()
    legend_above(fig, h, l, ncol=1)


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
