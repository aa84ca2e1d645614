"""Closed-loop figures (docs/closed-loop.md): every method inside a model's decode.

closed_loop_kl, closed_loop_top1, closed_loop_accuracy: KL(full ‖ method), top-1 agreement and task (needle)
accuracy against the exact-token budget, one line per method (per setting, where a method's runs are a
full grid of its budget and another parameter: wave with and without its estimation zone), one panel per
(model, context) (the papers' accuracy-vs-budget plots), from the closed-loop records and part files
(plotting/closed.py).

offline_online: for each (open-loop metric, closed-loop metric) pair, one scatter panel of the
(method, budget) points with the Spearman rank correlation in its title; data from each closed-loop
results directory's offline-online.json (retro_bench/closedloop/offline_online.py); several models (several
directories, `retro-bench plot DIR OTHER...`) share the panels, one marker fill per model."""
import json
import os
from collections import OrderedDict

from .. import closed as C
from .. import style
from ..results import fmt_value
from .drawing import legend_above, method_line, pct_axis
from .registry import drawer, figure

# ----------------------------------------------------------------------------------------------------
# accuracy vs. budget inside the decode

_BUDGET = {  # figure -> (value, axis label, log y)
    "closed_loop_kl": ("kl_mean", "KL(full‖method), nats ↓", True),
    "closed_loop_top1": ("top1", "Top-1 agreement ↑", False),
    "closed_loop_accuracy": ("accuracy", "Task accuracy ↑", False),
}
_COLS = 4


def _grid(s):
    """(rows, cols, [(row, col) per panel]): one row per model, its contexts left to right (wrapped after
    _COLS)."""
    models = list(OrderedDict((p["model_label"], 1) for p in s["panels"]))
    per = OrderedDict((m, [p for p in s["panels"] if p["model_label"] == m]) for m in models)
    cols = min(_COLS, max(len(v) for v in per.values()))
    where, row = [], 0
    for m, ps in per.items():
        for k in range(len(ps)):
            where.append((row + k // cols, k % cols))
        row += (len(ps) + cols - 1) // cols
    order = {id(p): i for i, p in enumerate(q for ps in per.values() for q in ps)}
    return row, cols, [where[order[id(p)]] for p in s["panels"]]


def _budget_size(s):
    rows, cols, _ = _grid(s)
    return (style.COLUMN_W if cols == 1 else style.COLUMN_W * 0.5 + 2.0 * cols), 0.35 + 1.55 * rows


def variant_groups(pts):
    """A method's points -> [(suffix, points)]: one group, unless its runs form a full grid of one budget
    parameter x the settings of the others (wave's retrieval x estimation: each setting has the same
    number >= 2 of budgets), then one group per setting, its suffix "name=value, ..." (first appearance
    order). A method whose knobs move together (MagicPIG's K and L) stays one line."""
    def distinct(k):
        return {fmt_value(q["params"].get(k)) for q in pts}
    keys = sorted({k for q in pts for k in q.get("params", {})})
    varying = [k for k in keys if len(distinct(k)) > 1]
    if len(varying) >= 2:
        for budget in sorted(varying, key=lambda k: -len(distinct(k))):
            others = [k for k in varying if k != budget]
            groups = OrderedDict()
            for q in pts:
                groups.setdefault(tuple(fmt_value(q["params"].get(k)) for k in others), []).append(q)
            sizes = {len(g) for g in groups.values()}
            if len(groups) > 1 and len(sizes) == 1 and min(sizes) >= 2:
                return [(", ".join(f"{k}={v}" for k, v in zip(others, key)), g) for key, g in groups.items()]
    return [(None, pts)]


def budget_series(res, fig_name):
    """Panels per (model, context) with the runs that have the figure's value and an exact_frac: one
    series per method and setting (variant_groups: {method, variant, suffix, points}), its points sorted by
    exact_frac (x: the exact-token fraction of the decode loops behind the value); the reference's value
    (full attention) apart."""
    key, ylabel, log_y = _BUDGET[fig_name]
    panels = []
    for (model, ctx), pts in C.points(res).items():
        ref = next((p for p in pts if p["method"] == C.REFERENCE and p.get(key) is not None), None)
        series = OrderedDict()
        xkey = "exact_frac_task" if key == "accuracy" else "exact_frac_fidelity"
        for p in pts:
            if p["method"] == C.REFERENCE or p.get(key) is None or p.get(xkey) is None:
                continue
            series.setdefault(p["method"], []).append(
                {"x": p[xkey], "y": p[key], "run_id": p["run_id"], "label": p["label"], "params": p.get("params", {}),
                 "cases": p["task_cases"] if key == "accuracy" else p["fidelity_cases"],
                 "positions": p["positions"] if key != "accuracy" else None})
        if not series:
            continue
        lines = []
        for m, v in series.items():
            for i, (suffix, g) in enumerate(variant_groups(v)):
                g.sort(key=lambda q: (q["x"], q["label"]))
                lines.append({"method": m, "variant": i, "suffix": suffix, "points": g})
        panels.append({"model": model, "model_label": C.model_label(model), "context": ctx,
                       "title": f"{C.model_label(model)} · {C.context_label(ctx)}",
                       "reference": ref[key] if ref else None, "source": pts[0]["source"],
                       "series": lines})
    if not panels:
        return None
    return {"metric": key, "ylabel": ylabel, "log_y": log_y, "x_metric": "exact_frac", "panels": panels}


def _budget_figure(name, title, needs):
    fn = figure(name, title, needs=needs, size=_budget_size, paper="closed loop (issue 27): RetroInfer Tab. 2-3, "
                "Quest Fig. 6, RetrievalAttention Tab. 3 style")(lambda res: budget_series(res, name))
    drawer(name)(_draw_budget)
    return fn


def _draw_budget(s, fig):
    rows, cols, where = _grid(s)
    axes = fig.subplots(rows, cols, squeeze=False)
    handles = OrderedDict()
    log_y = s["log_y"]
    positive = [q["y"] for p in s["panels"] for ser in p["series"] for q in ser["points"] if q["y"] > 0]
    floor = min(positive) / 10 if log_y and positive else 1e-6
    used = set(where)
    for p, (r, c) in zip(s["panels"], where):
        ax = axes[r][c]
        for ser in p["series"]:
            xs = [100 * q["x"] for q in ser["points"]]
            ys = [max(q["y"], floor) if log_y else q["y"] for q in ser["points"]]
            name = style.method_style(ser["method"])["name"]
            label = f"{name} {ser['suffix']}" if ser.get("suffix") else name
            h = method_line(ax, xs, ys, ser["method"], label=label, variant=ser.get("variant", 0), ms=3.5)
            handles.setdefault(label, h)
        if p["reference"] is not None and not (log_y and p["reference"] <= 0):
            st = style.method_style("full")
            h = ax.axhline(p["reference"], color=st["color"], ls="--", lw=0.8, label=st["name"])
            handles.setdefault(st["name"], h)
        pct_axis(ax, "x")
        if log_y:
            ax.set_yscale("log")
        else:
            ax.set_ylim(-0.03, 1.03)
        ax.set_title(p["title"], fontsize=7)
        if (r + 1, c) not in used:
            ax.set_xlabel(style.metric_label("exact_frac"))
        if c == 0:
            ax.set_ylabel(s["ylabel"])
    for r in range(rows):
        for c in range(cols):
            if (r, c) not in used:
                axes[r][c].set_visible(False)
    fig.tight_layout(pad=0.3, w_pad=0.8, h_pad=0.6)
    legend_above(fig, list(handles.values()), list(handles.keys()), ncol=min(len(handles), 5))


_budget_figure("closed_loop_kl", "Closed loop: KL(full ‖ method) vs. exact-token budget",
               "closed-loop runs with fidelity results (\"fidelity\" cases or a cases file's text lines)")
_budget_figure("closed_loop_top1", "Closed loop: top-1 agreement with full attention vs. exact-token budget",
               "closed-loop runs with fidelity results (\"fidelity\" cases or a cases file's text lines)")
_budget_figure("closed_loop_accuracy", "Closed loop: task (needle) accuracy vs. exact-token budget",
               "closed-loop runs with scored task results (\"niah\" cases or a cases file's answers)")



# ----------------------------------------------------------------------------------------------------
# offline vs. online

_CLOSED = (("kl_mean", "KL(full‖method) ↓", True), ("niah_accuracy", "NIAH accuracy ↑", False))
_OPEN = (("recall@100", "Recall@100 (open loop)"), ("mass", "Mass (open loop)"), ("out_err", "Output err. (open loop)"))


def _offline_online_files(res):
    """[(model, offline-online.json object)] of the directories (the main one first)."""
    out = []
    for d in [res] + list(getattr(res, "others", [])):
        p = os.path.join(d.path, "offline-online.json")
        if os.path.exists(p):
            with open(p, encoding="utf-8") as f:
                out.append((C.model_of(d), json.load(f)))
    return out


@figure("offline_online", "Offline vs. online: open-loop metrics against closed-loop fidelity and accuracy",
        needs="offline-online.json (a closed-loop config with an \"open_loop\" section)",
        size=(2 * style.COLUMN_W, 3.2), paper="closed loop (issue 15)")
def offline_online(res):
    files = _offline_online_files(res)
    if not files:
        return None
    model_labels = list(OrderedDict((C.model_label(m), 1) for m, _ in files))
    panels = []
    for cname, clabel, log in _CLOSED:
        for oname, olabel in _OPEN:
            pts, by_model = [], OrderedDict()
            for model, obj in files:
                ml = C.model_label(model)
                rho = {(t["open"], t["closed"]): t["spearman"] for t in obj.get("table", [])}
                mp = [{"method": q["method"], "label": q["label"], "model": ml, "x": q[oname], "y": q[cname]}
                      for q in obj.get("points", []) if q.get(oname) is not None and q.get(cname) is not None]
                if mp:
                    pts += mp
                    by_model[ml] = rho.get((oname, cname))
            if pts:
                panels.append({"open": oname, "closed": cname, "xlabel": olabel, "ylabel": clabel, "log_y": log,
                               "spearman": next(iter(by_model.values())), "spearman_by_model": by_model,
                               "points": pts})
    return {"panels": panels, "models": model_labels} if panels else None


@drawer("offline_online")
def _draw_offline_online(s, fig):
    rows = list(OrderedDict((p["closed"], 1) for p in s["panels"]))
    cols = list(OrderedDict((p["open"], 1) for p in s["panels"]))
    axes = fig.subplots(len(rows), len(cols), squeeze=False)
    handles = OrderedDict()
    models = s.get("models") or []
    several = len(models) > 1
    for p in s["panels"]:
        ax = axes[rows.index(p["closed"])][cols.index(p["open"])]
        for q in p["points"]:
            st = style.method_style(q["method"])
            filled = not several or models.index(q["model"]) % 2 == 0
            h = ax.plot([q["x"]], [max(q["y"], 1e-6) if p["log_y"] else q["y"]], st["marker"], color=st["color"],
                        ms=3.5, label=st["name"], markerfacecolor=st["color"] if filled else "white",
                        alpha=1.0 if not several or models.index(q["model"]) < 2 else 0.5)[0]
            handles.setdefault(st["name"], h)
        if p["log_y"]:
            ax.set_yscale("log")
        if several:
            # per model in legend order, with its marker fill (● filled, ○ hollow)
            ax.set_title("ρ " + ", ".join((f"{r:.2f}" if r is not None else "undef.") + " " + "●○"[models.index(m) % 2]
                                          for m, r in p["spearman_by_model"].items()), fontsize=7)
        else:
            r = p["spearman"]
            ax.set_title(f"Spearman ρ = {r:.2f}" if r is not None else "ρ undefined", fontsize=7)
        ax.set_xlabel(p["xlabel"])
        if cols.index(p["open"]) == 0:
            ax.set_ylabel(p["ylabel"])
    fig.tight_layout(pad=0.3, w_pad=0.6, h_pad=0.6)
    labels = list(handles.keys())
    hs = list(handles.values())
    if several:  # which fill is which model
        for i, m in enumerate(models):
            hs.append(axes[0][0].plot([], [], "o", color="#555555", ms=3.5,
                                      markerfacecolor="#555555" if i % 2 == 0 else "white")[0])
            labels.append(m)
    legend_above(fig, hs, labels, ncol=6)
