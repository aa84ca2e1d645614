"""Whole-model decode throughput per GPU from one retro_gpu_check run (issue 40 #5; RetroInfer's Figure 12).

Each wave-vs-full row of the report carries its layer step under the one timing rule (total_us: the step with
its admission) and the layer's work outside attention timed with cuBLAS at the same batch in the same run
(dense_us), so tokens/s per GPU = batch / (layers x (total_us + dense_us)). This table adds the memory model:

    full, full-*, quest, pq, wave-hbm (KV in HBM):  weights + B x layers x KV(N)          <= GPU memory
    wave, wave-dev* (KV in pinned host memory):      weights + B x layers x r x KV(N)      <= GPU memory
                                                     B x layers x KV(N)                    <= host memory
    KV(N) = N x kv_heads x head_dim x 2 (K, V) x 2 bytes, one sequence's KV of one layer

with r the share of a sequence's KV that wave keeps on the GPU (--wave-resident: the 5% block cache, the
meta index's centroids and value sums ~1/16, the execution buffer's 1.8% + steady zone: 0.13 by default).
Rows beyond a method's cap print "oom"; where host memory cannot hold every layer's KV the wave row still
shows the measured layer (its other layers modeled as its repeats) and says so. Below each context: the
best tokens/s of each method within its cap, and wave (offloaded) over memory-capped full (the issue's
target: >= 3x at 128K; the paper: 4.4x), and the smallest batch from which each offloaded method's tokens/s
exceed that best (where offloading starts to pay). Prints Markdown; --figure draws the same as tokens/s vs
batch, one panel per context (issue 40 #5's figure).

    PYTHONPATH=python python3 -m retro_bench.gpu.model_throughput GPU_REPORT.json [GPU_REPORT.json ...]
        [--weights-GB 16.06] [--gpu-GiB G] [--reserved-GiB 4] [--host-GiB 128] [--wave-resident 0.13]
        [--figure FIG.png]
"""
import argparse
import json
import sys

HBM_METHODS = ("full", "full-cudnn", "full-own", "quest", "pq-hbm", "wave-hbm", "wave-hbm-host")
OFFLOADED = ("wave", "wave-dev", "wave-dev-async", "wave-dev-nocache", "pq", "pq-async")  # every row with the KV in host memory


def load(paths):
    rows, model = [], {}
    for p in paths:
        with open(p) as f:
            data = json.load(f)
        rows += [r for r in data.get("wave_run", []) if r.get("status") == "ok" and r.get("tokens_per_s")]
        model = data.get("wave_run_model", model)
    return rows, model


def ctx_name(n):
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def caps(method, n, model, a):
    """(largest batch that fits, note) for `method` at context n."""
    kv = n * model["kv_heads"] * model["head_dim"] * 4.0 * model["layers"]  # one sequence, every layer
    gpu = (a.gpu_GiB if a.gpu_GiB else model.get("device_memory_bytes", 0) / 2**30) - a.reserved_GiB
    free = gpu * 2**30 - a.weights_GB * 1e9
    if method in OFFLOADED:
        gpu_cap = int(free // (a.wave_resident * kv)) if free > 0 else 0
        host_cap = int(a.host_GiB * 2**30 // kv)
        return gpu_cap, host_cap
    return (int(free // kv) if free > 0 else 0), None


def tables(rows, model, a):
    """Per context: {context, methods, caps {method: (gpu cap, host cap or None)}, rows [{batch, cells {method:
    {tps, oom, host_short}}}], best {method: (tokens/s, batch)} within its cap, full (the fastest
    memory-capped full row's method), pays_from {offloaded method: the smallest batch whose tokens/s exceed
    capped full's best, or None}}."""
    methods = [m for m in HBM_METHODS + OFFLOADED if any(r["method"] == m for r in rows)]
    by = {(r["method"], r["context"], r["batch"]): r for r in rows}
    out = []
    for n in sorted({r["context"] for r in rows}):
        t = {"context": n, "methods": methods, "caps": {m: caps(m, n, model, a) for m in methods}, "rows": [],
             "best": {}, "full": None, "pays_from": {}}
        for b in sorted({r["batch"] for r in rows if r["context"] == n}):
            cells = {}
            for m in methods:
                r = by.get((m, n, b))
                if not r:
                    continue
                cap, host_cap = t["caps"][m]
                cells[m] = {"tps": r["tokens_per_s"], "oom": b > cap,
                            "host_short": host_cap is not None and b > host_cap}
                if b <= cap and r["tokens_per_s"] > t["best"].get(m, (0, 0))[0]:
                    t["best"][m] = (r["tokens_per_s"], b)
            t["rows"].append({"batch": b, "cells": cells})
        fulls = [m for m in methods if m.startswith("full") and m in t["best"]]
        if fulls:
            t["full"] = max(fulls, key=lambda m: t["best"][m][0])
            bar = t["best"][t["full"]][0]
            for m in methods:
                if m in OFFLOADED:
                    t["pays_from"][m] = next((row["batch"] for row in t["rows"] if m in row["cells"] and
                                              not row["cells"][m]["oom"] and row["cells"][m]["tps"] > bar), None)
        out.append(t)
    return out


def print_tables(ts, model, a):
    print(f"model: {model.get('dense') or '?'}, {model['layers']} layers; weights {a.weights_GB:g} GB; "
          f"wave keeps {a.wave_resident:g} of its KV on the GPU; host memory {a.host_GiB:g} GiB\n")
    for t in ts:
        methods = t["methods"]
        print(f"### {ctx_name(t['context'])}\n")
        head = ["batch"] + [f"{m} (cap {t['caps'][m][0]})" for m in methods]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        notes = set()
        for row in t["rows"]:
            cells = [str(row["batch"])]
            for m in methods:
                c = row["cells"].get(m)
                if not c:
                    cells.append("-")
                elif c["oom"]:
                    cells.append(f"oom ({c['tps']:.0f})")
                else:
                    cell = f"{c['tps']:.0f}"
                    if c["host_short"]:
                        cell += "†"
                        notes.add("† host memory holds fewer sequences' KV of every layer: one layer measured, "
                                  "the others modeled as its repeats")
                    cells.append(cell)
            print("| " + " | ".join(cells) + " |")
        print()
        for note in sorted(notes):
            print(note + "\n")
        if t["full"]:
            f, best = t["full"], t["best"]
            line = f"best within its cap: {f} {best[f][0]:.0f} tokens/s (batch {best[f][1]})"
            for m in methods:
                if m in best and not m.startswith("full"):
                    line += f"; {m} {best[m][0]:.0f} (batch {best[m][1]}, {best[m][0] / best[f][0]:.2f}x)"
            print(line + "\n")
            pays = [f"{m} from batch {b}" if b is not None else f"{m} at no measured batch"
                    for m, b in t["pays_from"].items()]
            if pays:
                print(f"offloading pays (tokens/s above {f}'s best within its cap): " + "; ".join(pays) + "\n")


def figure_methods(t):
    """The rows a context's panel draws: the fastest memory-capped full row, wave in HBM, the fastest offloaded
    wave row (wave, wave-dev*: one line), and every other method (Quest, PQCache in HBM and offloaded, ...)."""
    waves = [m for m in t["methods"] if m in OFFLOADED and m.startswith("wave")]
    wave = max(waves, key=lambda m: t["best"].get(m, (0, 0))[0]) if waves else None
    return [m for m in t["methods"] if m == t["full"] or m == wave or
            not (m.startswith("full") or m in waves)]


def draw(ts, path):
    """One panel per context: tokens/s vs batch (log-log) for figure_methods, their points within the memory cap
    filled, those beyond it hollow on a dotted line; KV-in-HBM methods dashed, offloaded ones solid; capped
    full's best as a grey line."""
    import os

    from ..plotting import style
    from ..plotting.cli import require_matplotlib
    from ..plotting.figure_file import savefig_atomic
    from ..plotting.figures.gpu import batch_axis, ctx_title, plain_log_y
    require_matplotlib()
    import matplotlib.pyplot as plt
    style.apply_rc()
    fig, axes = plt.subplots(1, len(ts), figsize=(style.WIDE_W, 2.1), squeeze=False)
    for ax, t in zip(axes[0], ts):
        for m in figure_methods(t):
            st = style.method_style(m.split("-")[0])
            pts = [(row["batch"], row["cells"][m]) for row in t["rows"] if m in row["cells"]]
            if not pts:
                continue
            ls = "-" if m in OFFLOADED else "--"
            fits = [(b, c["tps"]) for b, c in pts if not c["oom"]]
            over = [(b, c["tps"]) for b, c in pts if c["oom"]]
            if fits:
                ax.plot(*zip(*fits), ls=ls, marker=st["marker"], color=st["color"],
                        label=f"{m} (cap {t['caps'][m][0]})")
            if over:
                line = fits[-1:] + over
                ax.plot(*zip(*line), ls=":", color=st["color"], lw=0.8)
                ax.plot(*zip(*over), ls="none", marker=st["marker"], mfc="none", color=st["color"],
                        label=None if fits else f"{m} (cap {t['caps'][m][0]})")
        if t["full"]:
            ax.axhline(t["best"][t["full"]][0], color="0.5", lw=0.6, ls="-.")
        batch_axis(ax)
        plain_log_y(ax)
        ax.set_title(ctx_title(t["context"]))
    axes[0][0].set_ylabel("Decode tokens/s per GPU")
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    savefig_atomic(fig, path, os.path.splitext(path)[1].lstrip(".") or "png")
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--weights-GB", type=float, default=16.06, help="all weights, 16-bit (Llama-3-8B: 16.06)")
    ap.add_argument("--gpu-GiB", type=float, default=0.0, help="GPU memory (default: the report's device)")
    ap.add_argument("--reserved-GiB", type=float, default=4.0, help="runtime, activations, workspace")
    ap.add_argument("--host-GiB", type=float, default=128.0, help="host memory for offloaded KV")
    ap.add_argument("--wave-resident", type=float, default=0.13)
    ap.add_argument("--figure", default=None, metavar="PATH",
                    help="also draw tokens/s vs batch per context (png, pdf or svg by the extension)")
    a = ap.parse_args(argv)
    rows, model = load(a.reports)
    if not rows or not model:
        print("model_throughput: no rows with tokens_per_s (a report of retro_gpu_check with the dense layer)",
              file=sys.stderr)
        return 2
    ts = tables(rows, model, a)
    print_tables(ts, model, a)
    if a.figure:
        draw(ts, a.figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
