"""Closed-loop figures (docs/closed-loop.md).

offline_online: for each (open-loop metric, closed-loop metric) pair, one scatter panel of the
(method, budget) points with the Spearman rank correlation in its title; data from the closed-loop
results directory's offline-online.json (scripts/closedloop/offline_online.py)."""
import json
import os
from collections import OrderedDict

from .. import style
from .drawing import legend_above
from .registry import drawer, figure

_CLOSED = (("kl_mean", "KL(full‖method) ↓", True), ("niah_accuracy", "NIAH accuracy ↑", False))
_OPEN = (("recall@100", "Recall@100 (open loop)"), ("mass", "Mass (open loop)"), ("out_err", "Output err. (open loop)"))


@figure("offline_online", "Offline vs. online: open-loop metrics against closed-loop fidelity and accuracy",
        needs="offline-online.json (a closed-loop config with an \"open_loop\" section)",
        size=(2 * style.COLUMN_W, 3.2), paper="closed loop (issue 15)")
def offline_online(res):
    p = os.path.join(res.path, "offline-online.json")
    if not os.path.exists(p):
        return None
    with open(p, encoding="utf-8") as f:
        obj = json.load(f)
    rho = {(t["open"], t["closed"]): t["spearman"] for t in obj.get("table", [])}
    panels = []
    for cname, clabel, log in _CLOSED:
        for oname, olabel in _OPEN:
            pts = [{"method": q["method"], "label": q["label"], "x": q[oname], "y": q[cname]}
                   for q in obj.get("points", []) if q.get(oname) is not None and q.get(cname) is not None]
            if pts:
                panels.append({"open": oname, "closed": cname, "xlabel": olabel, "ylabel": clabel, "log_y": log,
                               "spearman": rho.get((oname, cname)), "points": pts})
    return {"panels": panels} if panels else None


@drawer("offline_online")
def _draw_offline_online(s, fig):
    rows = list(OrderedDict((p["closed"], 1) for p in s["panels"]))
    cols = list(OrderedDict((p["open"], 1) for p in s["panels"]))
    axes = fig.subplots(len(rows), len(cols), squeeze=False)
    handles = OrderedDict()
    for p in s["panels"]:
        ax = axes[rows.index(p["closed"])][cols.index(p["open"])]
        for q in p["points"]:
            st = style.method_style(q["method"])
            h = ax.plot([q["x"]], [max(q["y"], 1e-6) if p["log_y"] else q["y"]], st["marker"], color=st["color"],
                        ms=3.5, label=st["name"])[0]
            handles.setdefault(st["name"], h)
        if p["log_y"]:
            ax.set_yscale("log")
        r = p["spearman"]
        ax.set_title(f"Spearman ρ = {r:.2f}" if r is not None else "ρ undefined", fontsize=7)
        ax.set_xlabel(p["xlabel"])
        if cols.index(p["open"]) == 0:
            ax.set_ylabel(p["ylabel"])
    fig.tight_layout(pad=0.3, w_pad=0.6, h_pad=0.6)
    legend_above(fig, list(handles.values()), list(handles.keys()), ncol=6)
