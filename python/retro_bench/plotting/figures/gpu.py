"""What a GPU run measured (`"backend": "cuda"`, docs/cuda.md): decode step time vs. batch per method and
kernel, the phases of each step next to the cost model's prediction, and wave's speed-up over full
attention. Data from the records' `gpu_*_us` / `model_*_us` metric means and their `cuda` summary."""
from collections import OrderedDict

from .. import style
from ..results import cuda_batch, cuda_kernel, is_cuda_run, metric
from .common import WAVE, params_key
from .drawing import legend_above, method_line
from .registry import drawer, figure

KERNEL_NAME = {"flashinfer": "FlashInfer", "cudnn": "cuDNN", "own": "own kernel"}
KERNEL_ORDER = ("flashinfer", "cudnn", "own")  # the library kernel first (the primary baseline) when present

# measured phases (CUDA events, docs/cuda.md "What is timed"), bottom to top of a bar; "other" is the rest
# of gpu_step_us: the ranked ids' copy to the host, waiting for the host lookup, launch gaps
PHASES = (("select", "gpu_select_us", "select (rank)"), ("estimate", "gpu_estimate_us", "estimate"),
          ("gather", "gpu_gather_us", "gather"), ("attend", "gpu_attend_us", "attend"))
# the cost model's terms (layer_time, docs/system-model.md §5) and the measured phase each is matched with:
# model_select_us <-> rank + estimate, model_h2d_us <-> gather, model_attend_us <-> attend;
# model_step_us <-> gpu_step_us (its rest: the id copy and host lookup beyond the select, wave's overlap)
MODEL = (("select", "model_select_us"), ("gather", "model_h2d_us"), ("attend", "model_attend_us"))
MODEL_SUMMARY = {"select": "select", "gather": "gather", "attend": "attend"}  # record["cuda"]["phases"] keys
PHASE_NAMES = [p for p, _, _ in PHASES] + ["other"]


def _context(res, r):
    P = r.get("prompt_len")
    if P:
        return int(P)
    for t in res.manifest.get("traces", []):
        if t.get("path") == r.get("trace") and t.get("prompt_len"):
            return int(t["prompt_len"])
    return None


def _summary(r, phase, key):
    """record["cuda"]["phases"][phase][key] (measured_us | model_us), or None."""
    v = ((r.get("cuda") or {}).get("phases") or {}).get(phase, {}).get(key)
    return float(v) if isinstance(v, (int, float)) else None


def step_us(r):
    """The measured decode step of one layer for the whole batch (gpu_step_us mean; else the summary's)."""
    v = metric(r, "gpu_step_us")
    return v if v is not None else _summary(r, "step", "measured_us")


def method_label(method, kernel):
    if method == "full" and kernel:
        return f"{style.method_style('full')['name']} ({KERNEL_NAME.get(kernel, kernel)})"
    return style.method_style(method)["name"]


def _hardware(res, runs):
    """The cost model's hardware profile the model_* metrics were computed on."""
    names = []
    for r in runs:
        h = r.get("hardware") or res.manifest.get("hardware_profile")
        if h == "measured" and isinstance(res.manifest.get("hardware"), dict) and res.manifest["hardware"].get("name"):
            h = f"measured: {res.manifest['hardware']['name']}"
        if h and h not in names:
            names.append(h)
    return ", ".join(names) if names else None


def _points(series):
    """(point, its record) for every point of every series and context."""
    for s in series:
        for pts in s["by_context"].values():
            for p in pts:
                yield p, p["_run"]


def gpu_series(res):
    """Backend "cuda" records with a measured step, one series per (method, full's kernel, parameters,
    system point), ordered full (FlashInfer, own), then the other methods; each with its records by
    context (prompt length) and batch. ([series], contexts, devices, records) or None when there are none."""
    groups = OrderedDict()
    for r in res.runs:
        if not is_cuda_run(r) or step_us(r) is None:
            continue
        B, N = cuda_batch(r), _context(res, r)
        if B is None or N is None:
            continue
        key = (r.get("method"), cuda_kernel(r), params_key(r.get("params", {})), params_key(r.get("system", {})))
        groups.setdefault(key, []).append((N, B, r))
    if not groups:
        return None
    first = {k: i for i, k in enumerate(groups)}

    def order(k):
        m, kern = k[0], k[1]
        return (0 if m == "full" else 1, KERNEL_ORDER.index(kern) if kern in KERNEL_ORDER else len(KERNEL_ORDER),
                first[k])
    keys = sorted(groups, key=order)
    same = OrderedDict()  # (method, kernel) -> its series keys: parameters shown only when they differ
    for k in keys:
        same.setdefault(k[:2], []).append(k)
    series = []
    for k in keys:
        m, kern = k[0], k[1]
        label = method_label(m, kern)
        if len(same[k[:2]]) > 1:  # e.g. offloaded and resident full attention, two wave budgets
            r0 = groups[k][0][2]
            extra = [f"{p}={r0['params'].get(p)}" for p in res.varying_params(m)]
            extra += [f"{p}={r0.get('system', {}).get(p)}" for p in res.varying_system(m)]
            label += (" " + " ".join(extra)) if extra else f" #{same[k[:2]].index(k) + 1}"
        by = OrderedDict()
        for N, B, r in sorted(groups[k], key=lambda x: (x[0], x[1])):
            pts = by.setdefault(str(N), [])
            if pts and pts[-1]["batch"] == B:
                continue  # the same point twice (another trace of this length): the first one
            pts.append({"batch": B, "run_id": r.get("run_id"), "_run": r})
        series.append({"method": m, "kernel": kern, "label": label, "by_context": by})
    contexts = sorted({int(N) for s in series for N in s["by_context"]})
    devices = []
    for k in keys:
        for _, _, r in groups[k]:
            d = (r.get("cuda") or {}).get("device")
            if d and d not in devices:
                devices.append(d)
    return series, contexts, devices, [r for k in keys for _, _, r in groups[k]]


def _strip(series):
    for s in series:
        for pts in s["by_context"].values():
            for p in pts:
                p.pop("_run", None)
    return series


def _variants(series):
    seen = {}
    for s in series:
        s["variant"] = seen.get(s["method"], 0)
        seen[s["method"]] = s["variant"] + 1


# ----------------------------------------------------------------------------------------------------
# 1. decode step time vs. batch

@figure("gpu_step_time", "GPU decode step time vs. batch size per context (measured)",
        needs="records of a \"backend\": \"cuda\" run (gpu_step_us)",
        size=(style.WIDE_W, 1.9), paper="RetroInfer Fig. 12 style (measured per-layer step, not modeled)")
def gpu_step_time(res):
    got = gpu_series(res)
    if got is None:
        return None
    series, contexts, devices, runs = got
    for p, r in _points(series):
        p["step_us"] = step_us(r)
        p["model_step_us"] = metric(r, "model_step_us")
    _variants(series)
    return {"device": ", ".join(devices) or None, "hardware": _hardware(res, runs), "contexts": contexts,
            "series": _strip(series)}


# ----------------------------------------------------------------------------------------------------
# 2. the phases of each step, measured and modeled

@figure("gpu_phases", "GPU decode step phases per batch: measured (CUDA events) vs. the cost model",
        needs="records of a \"backend\": \"cuda\" run (gpu_step_us and the gpu_*_us phases)",
        size=(style.WIDE_W, lambda s: 0.55 + 1.3 * len(s["rows"])),
        paper="RetroInfer §5 latency breakdown style; docs/cuda.md (measured vs. predicted)")
def gpu_phases(res):
    got = gpu_series(res)
    if got is None:
        return None
    series, contexts, devices, runs = got
    for p, r in _points(series):
        step = step_us(r)
        meas = OrderedDict()
        for name, met, _ in PHASES:
            v = metric(r, met)
            if v is None and name != "estimate":  # the summary's select includes the estimation
                v = _summary(r, name, "measured_us")
            meas[name] = v or 0.0
        meas["other"] = max(0.0, step - sum(meas.values()))
        p["step_us"] = step
        p["host_us"] = metric(r, "gpu_host_us")
        p["measured"] = meas
        model = OrderedDict()
        for name, met in MODEL:
            v = metric(r, met)
            model[name] = v if v is not None else _summary(r, MODEL_SUMMARY[name], "model_us")
        mstep = metric(r, "model_step_us")
        if mstep is None:
            mstep = _summary(r, "step", "model_us")
        if mstep is None or any(v is None for v in model.values()):
            p["model"], p["model_step_us"] = None, mstep
        else:
            model = OrderedDict((n, model.get(n, 0.0)) for n in PHASE_NAMES)
            model["other"] = max(0.0, mstep - sum(model.values()))
            p["model"], p["model_step_us"] = model, mstep
    return {"device": ", ".join(devices) or None, "hardware": _hardware(res, runs), "contexts": contexts,
            "phases": PHASE_NAMES, "rows": _strip(series)}


# ----------------------------------------------------------------------------------------------------
# 3. speed-up of wave over full attention

@figure("gpu_speedup", "GPU decode: wave's speed-up over full attention vs. batch size per context (measured)",
        needs="records of a \"backend\": \"cuda\" run with full and wave at the same context and batch",
        size=(style.WIDE_W, 1.85), paper="RetroInfer Fig. 12 (speed-up over full attention), measured")
def gpu_speedup(res):
    got = gpu_series(res)
    if got is None:
        return None
    series, contexts, devices, runs = got
    fulls = [s for s in series if s["method"] == "full"]
    others = [s for s in series if s["method"] != "full"]
    waves = [s for s in others if s["method"] == WAVE] or others
    out = []
    for w in waves:
        for i, f in enumerate(fulls):
            by = OrderedDict()
            for N in contexts:
                fb = {p["batch"]: p for p in f["by_context"].get(str(N), [])}
                pts = []
                for p in w["by_context"].get(str(N), []):
                    q = fb.get(p["batch"])
                    if q is None:
                        continue
                    fu, wu = step_us(q["_run"]), step_us(p["_run"])
                    if not wu or wu <= 0:
                        continue
                    pts.append({"batch": p["batch"], "speedup": fu / wu, "full_us": fu, "wave_us": wu,
                                "full_run_id": q["run_id"], "wave_run_id": p["run_id"]})
                if pts:
                    by[str(N)] = pts
            if by:
                out.append({"method": w["method"], "kernel": f["kernel"], "baseline": f["label"],
                            "of": w["label"], "label": f"{w['label']} vs. {f['label']}",
                            "primary": i == 0, "variant": i, "by_context": by})
    if not out:
        return None
    return {"device": ", ".join(devices) or None, "contexts": [N for N in contexts
                                                               if any(str(N) in s["by_context"] for s in out)],
            "baseline_kernel": fulls[0]["kernel"], "series": out}


# ====================================================================================================
# drawing (matplotlib imported by the caller; nothing here reads results)

PHASE_COLOR = {"select": "#4477AA", "estimate": "#66CCEE", "gather": "#CCBB44", "attend": "#EE6677",
               "other": "#BBBBBB"}  # Paul Tol's bright scheme: apart from the method colours' meaning
PHASE_LABEL = {"select": "select (rank)", "estimate": "estimate", "gather": "gather",
               "attend": "attend", "other": "rest of the step (id copy, host wait, gaps)"}


def ctx_title(N):
    return f"{style.tokens_label(N)} context"


def batch_axis(ax):
    from matplotlib.ticker import FuncFormatter, NullFormatter
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("Batch size")


def plain_log_y(ax):
    from matplotlib.ticker import FuncFormatter
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


@drawer("gpu_step_time")
def _draw_gpu_step_time(s, fig):
    ctx = s["contexts"]
    axes = fig.subplots(1, len(ctx), squeeze=False, sharey=True)[0]
    handles = OrderedDict()
    for ax, N in zip(axes, ctx):
        for ser in s["series"]:
            pts = ser["by_context"].get(str(N), [])
            if not pts:
                continue
            h = method_line(ax, [p["batch"] for p in pts], [p["step_us"] for p in pts], ser["method"],
                            label=ser["label"], variant=ser["variant"], ms=3.5)
            handles.setdefault(ser["label"], h)
        batch_axis(ax)
        plain_log_y(ax)
        ax.set_title(ctx_title(N))
    axes[0].set_ylabel("Step time (µs per layer)" + (f"\n{s['device']}" if s.get("device") else ""))
    fig.tight_layout(pad=0.3, w_pad=0.8)
    legend_above(fig, list(handles.values()), list(handles.keys()), ncol=min(len(handles), 4))


@drawer("gpu_phases")
def _draw_gpu_phases(s, fig):
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    rows, ctx = s["rows"], s["contexts"]
    axes = fig.subplots(len(rows), len(ctx), squeeze=False)
    used, host_drawn, model_drawn = set(), False, False
    w = 0.38
    for i, row in enumerate(rows):
        for j, N in enumerate(ctx):
            ax = axes[i][j]
            pts = row["by_context"].get(str(N), [])
            top = 0.0
            for x, p in enumerate(pts):
                bottom = 0.0
                for ph in s["phases"]:
                    v = p["measured"].get(ph, 0.0)
                    if v > 0:
                        ax.bar(x - w / 2, v, w, bottom=bottom, color=PHASE_COLOR[ph], edgecolor="white", lw=0.3)
                        used.add(ph)
                    bottom += v
                top = max(top, bottom)
                if p.get("model"):
                    mb = 0.0
                    for ph in s["phases"]:
                        v = p["model"].get(ph, 0.0)
                        if v > 0:
                            ax.bar(x + w / 2, v, w, bottom=mb, color="white", edgecolor=PHASE_COLOR[ph],
                                   hatch="/////", lw=0.6)
                            used.add(ph)
                        mb += v
                    model_drawn = True
                    top = max(top, mb)
                    if p.get("model_step_us"):
                        ax.text(x, max(bottom, mb), f"{p['step_us'] / p['model_step_us']:.1f}×", ha="center",
                                va="bottom", fontsize=5, color="#333333")
                if p.get("host_us"):
                    ax.plot([x - w / 2], [p["host_us"]], ls="none", marker="D", ms=2.6, color="black",
                            mfc="white", mew=0.7, zorder=5)
                    host_drawn = True
            ax.set_xticks(range(len(pts)))
            ax.set_xticklabels([str(p["batch"]) for p in pts])
            ax.set_xlim(-0.6, max(len(pts), 1) - 0.4)
            ax.set_ylim(0, top * 1.18 if top > 0 else 1)
            ax.grid(axis="x", visible=False)
            if i == 0:
                ax.set_title(ctx_title(N))
            if i == len(rows) - 1:
                ax.set_xlabel("Batch size")
            if j == 0:
                ax.set_ylabel(f"{row['label']}\nµs per layer step", fontsize=6.5)
    handles = [Patch(facecolor=PHASE_COLOR[ph], edgecolor="white", label=PHASE_LABEL[ph])
               for ph in s["phases"] if ph in used]
    if model_drawn:
        handles.append(Patch(facecolor="white", edgecolor="#555555", hatch="/////",
                             label=f"cost model ({s['hardware']}); n× = measured / model step"
                             if s.get("hardware") else "cost model; n× = measured / model step"))
    if host_drawn:
        handles.append(Line2D([], [], ls="none", marker="D", ms=3, color="black", mfc="white", mew=0.7,
                              label="host lookup (wall clock, beside the estimate)"))
    fig.tight_layout(pad=0.3, w_pad=0.8, h_pad=0.6)
    legend_above(fig, handles, [h.get_label() for h in handles], ncol=min(len(handles), 4))


@drawer("gpu_speedup")
def _draw_gpu_speedup(s, fig):
    ctx = s["contexts"]
    axes = fig.subplots(1, len(ctx), squeeze=False, sharey=True)[0]
    handles = OrderedDict()
    lo, hi = 1.0, 1.0
    for ax, N in zip(axes, ctx):
        for ser in s["series"]:
            pts = ser["by_context"].get(str(N), [])
            if not pts:
                continue
            ys = [p["speedup"] for p in pts]
            lab = f"vs. {ser['baseline']}"
            if len({x["of"] for x in s["series"]}) > 1:
                lab = f"{ser['of']} " + lab
            h = method_line(ax, [p["batch"] for p in pts], ys, ser["method"], label=lab, variant=ser["variant"],
                            ms=3.5)
            handles.setdefault(lab, h)
            ax.annotate(f"{ys[-1]:.2f}×", (pts[-1]["batch"], ys[-1]), textcoords="offset points", xytext=(3, 0),
                        fontsize=5.5, color=h.get_color(), va="center")
            lo, hi = min(lo, min(ys)), max(hi, max(ys))
        ax.axhline(1.0, color="#777777", lw=0.8, ls="--", zorder=1)
        batch_axis(ax)
        ax.set_xlim(right=ax.get_xlim()[1] * 1.35)  # room for the last point's value
        ax.set_title(ctx_title(N))
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    axes[0].set_yscale("log")
    axes[0].set_ylim(lo / 1.25, hi * 1.25)
    ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 7, 10, 20, 50, 100)
             if lo / 1.25 <= t <= hi * 1.25]
    axes[0].yaxis.set_major_locator(FixedLocator(ticks))
    axes[0].yaxis.set_minor_locator(NullLocator())
    axes[0].yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    axes[0].set_ylabel("Speed-up of wave\n(full step / wave step)")
    from matplotlib.lines import Line2D
    handles["1× (as fast as full attention)"] = Line2D([], [], color="#777777", lw=0.8, ls="--")
    fig.tight_layout(pad=0.3, w_pad=0.8)
    legend_above(fig, list(handles.values()), list(handles.keys()), ncol=min(len(handles), 3))
