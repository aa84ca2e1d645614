"""The wave index's knobs: zone sizes, the estimation zone, decode-time updates, cluster ranking."""
import math
import statistics
from collections import OrderedDict

from .. import style
from ..results import metric, fmt_value
from .common import WAVE, WAVE_DEFAULTS, accuracy_metrics, differs_only_in, first_trace_runs, params_key, sweep_centre
from .drawing import legend_above, method_line, pct_axis, ylim_metric
from .registry import drawer, figure


# ----------------------------------------------------------------------------------------------------
# zone sweeps (RetroInfer Fig. 17)

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
    runs = first_trace_runs(res, WAVE)
    if len(runs) < 5:
        return None
    centre = sweep_centre(runs, WAVE_DEFAULTS)
    metrics = accuracy_metrics(res)
    # modeled speed (docs/system-model.md §4): model_us is one layer's attention time per decode step
    sysm = "model_us" if res.has_metric("model_us") else None
    panels = []
    for axis, names, xlabel in ZONE_AXES:
        pts = []
        for r in runs:
            if not differs_only_in(r["params"], centre, names):
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
# with / without estimation at equal retrieval budget (RetroInfer Fig. 18a)

@figure("estimation", "Wave index with and without the estimation zone",
        needs="wave runs with estimation = 0 and > 0 at the same retrieval budget",
        size=(style.WIDE_W, 1.75), paper="RetroInfer Fig. 18a")
def estimation(res):
    runs = first_trace_runs(res, WAVE)
    groups = OrderedDict()   # other params -> {retrieval: {estimation: run}}
    for r in runs:
        p = r["params"]
        if "estimation" not in p or "retrieval" not in p:
            continue
        g = groups.setdefault(params_key(p, ("estimation", "retrieval")), OrderedDict())
        g.setdefault(p["retrieval"], OrderedDict())[p["estimation"]] = r

    def paired(g):
        return [rv for rv, by in g.items() if 0 in by and any(e > 0 for e in by)]
    best = max(groups.values(), key=lambda g: len(paired(g)), default=None)
    if best is None or not paired(best):
        return None
    rvals = sorted(paired(best))
    ests = sorted({e for rv in rvals for e in best[rv]})
    metrics = accuracy_metrics(res)
    variants = []
    for e in ests:
        rs = [best[rv].get(e) for rv in rvals]
        variants.append({"estimation": e,
                         "label": "w/o estimation" if e == 0 else f"w/ estimation ({style.pct_label(e)})",
                         "run_ids": [r["run_id"] if r else None for r in rs],
                         "exact_frac": [metric(r, "exact_frac") if r else None for r in rs],
                         "y": {m: [metric(r, m) if r else None for r in rs] for m in metrics}})
    if not any(y is not None for v in variants for ys in v["y"].values() for y in ys):
        return None  # runs without open-loop metrics (a closed-loop directory): nothing to draw
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
# decode-time index updates (RetroInfer §4.2)

@figure("updates", "Decode-time index updates: accuracy and GPU memory over a long generation",
        needs="wave runs with at least two update_segment values, and their parts/ files (per-step samples)",
        size=(style.WIDE_W, 1.75), paper="RetroInfer §4.2 (long-output setting)")
def updates(res):
    runs = first_trace_runs(res, WAVE)
    groups = OrderedDict()
    for r in runs:
        if "update_segment" in r["params"]:
            groups.setdefault(params_key(r["params"], ("update_segment",)), []).append(r)
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
# cumulative attention vs. centroid rank, with the centroid estimate and the oracle ranking
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
                pct_axis(ax, "x", log=p["axis"] == "retrieval")
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
                ylim_metric(axes[i][0], met, [q["y"][met] for pp in s["panels"] for q in pp["points"]])
    from matplotlib.lines import Line2D
    c = s["centre"]
    handles = [Line2D([], [], color=st["color"], marker=st["marker"], ms=3.5, label=st["name"]),
               Line2D([], [], ls="none", marker="o", ms=7, mfc="none", mec="#D55E00", mew=1.0,
                      label=f"sweep centre ({c.get('sink')}+{c.get('window')}, "
                            f"{style.pct_label(float(c['retrieval']))}, {style.pct_label(float(c['estimation']))})"
                      if all(k in c for k in ("sink", "window", "retrieval", "estimation")) else "sweep centre")]
    fig.tight_layout(pad=0.3, h_pad=0.4, w_pad=0.8)
    legend_above(fig, handles, [h.get_label() for h in handles], ncol=2)


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
    legend_above(fig, list(handles.values()), list(handles.keys()), ncol=min(len(handles), 4))


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
                h = method_line(ax, v["steps"], ys, v["method"], label=v["label"], variant=i, ms=2.5, markevery=4)
                i += 1
            handles.setdefault(v["label"], h)
        ax.set_xlabel("Decode step")
        ax.set_title(style.metric_short(met) + f" ({SMOOTH}-sample mean)" if met != "gpu_bytes"
                     else "GPU memory (MiB per KV head) ↓", fontsize=7.5)
        if met != "gpu_bytes":
            ylim_metric(ax, met, [y for v in s["variants"] if met in v["y"] for y in v["y"][met]])
        else:
            ax.set_ylim(bottom=0)
    fig.tight_layout(pad=0.3, w_pad=1.0)
    legend_above(fig, list(handles.values()), list(handles.keys()))


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
    legend_above(fig, h, l, ncol=1)
