"""The system model: GPU block cache hit ratio / PCIe traffic, and modeled throughput vs. batch."""
from collections import OrderedDict

from .. import style
from ..results import metric
from .common import params_key
from .drawing import legend_above, method_line
from .registry import drawer, figure


# ----------------------------------------------------------------------------------------------------
# GPU block cache (RetroInfer §4.3 / Fig. 15)

@figure("cache", "GPU block cache: hit ratio and PCIe traffic vs. cache size and policy",
        needs="runs with the cache_hit metric at two or more cache sizes (a config whose \"system\" sweeps \"cache\")",
        size=(style.COLUMN_W, 1.75), paper="RetroInfer §4.3 / Fig. 15")
def cache(res):
    groups = OrderedDict()
    for r in res.runs:
        sy = r.get("system", {})
        if "cache" not in sy or r["method"] == "full":
            continue
        key = (r["method"], params_key(r["params"]), str(sy.get("policy", "lru")))
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
# decode throughput vs. batch size from the cost model (RetroInfer Fig. 12)

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


# ====================================================================================================
# drawing (matplotlib imported by the caller; nothing here reads results)


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
    legend_above(fig, list(handles.values()), list(handles.keys()), ncol=3)


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
            h = method_line(ax, [p[0] for p in pts], [p[1] for p in pts], ser["method"], label=lab,
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
    legend_above(fig, list(handles.values()), list(handles.keys()), ncol=min(len(handles), 3))
