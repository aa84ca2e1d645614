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
target: >= 3x at 128K; the paper: 4.4x). Prints Markdown.

    PYTHONPATH=python python3 -m retro_bench.gpu.model_throughput GPU_REPORT.json [GPU_REPORT.json ...]
        [--weights-GB 16.06] [--gpu-GiB G] [--reserved-GiB 4] [--host-GiB 128] [--wave-resident 0.13]
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


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--weights-GB", type=float, default=16.06, help="all weights, 16-bit (Llama-3-8B: 16.06)")
    ap.add_argument("--gpu-GiB", type=float, default=0.0, help="GPU memory (default: the report's device)")
    ap.add_argument("--reserved-GiB", type=float, default=4.0, help="runtime, activations, workspace")
    ap.add_argument("--host-GiB", type=float, default=128.0, help="host memory for offloaded KV")
    ap.add_argument("--wave-resident", type=float, default=0.13)
    a = ap.parse_args(argv)
    rows, model = load(a.reports)
    if not rows or not model:
        print("model_throughput: no rows with tokens_per_s (a report of retro_gpu_check with the dense layer)",
              file=sys.stderr)
        return 2
    methods = [m for m in HBM_METHODS + OFFLOADED if any(r["method"] == m for r in rows)]
    by = {(r["method"], r["context"], r["batch"]): r for r in rows}
    print(f"model: {model.get('dense') or '?'}, {model['layers']} layers; weights {a.weights_GB:g} GB; "
          f"wave keeps {a.wave_resident:g} of its KV on the GPU; host memory {a.host_GiB:g} GiB\n")
    for n in sorted({r["context"] for r in rows}):
        print(f"### {ctx_name(n)}\n")
        head = ["batch"] + [f"{m} (cap {caps(m, n, model, a)[0]})" for m in methods]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        best = {}
        notes = set()
        for b in sorted({r["batch"] for r in rows if r["context"] == n}):
            cells = [str(b)]
            for m in methods:
                r = by.get((m, n, b))
                cap, host_cap = caps(m, n, model, a)
                if not r:
                    cells.append("-")
                elif b > cap:
                    cells.append(f"oom ({r['tokens_per_s']:.0f})")
                else:
                    cell = f"{r['tokens_per_s']:.0f}"
                    if host_cap is not None and b > host_cap:
                        cell += "†"
                        notes.add("† host memory holds fewer sequences' KV of every layer: one layer measured, "
                                  "the others modeled as its repeats")
                    cells.append(cell)
                    if r["tokens_per_s"] > best.get(m, (0, 0))[0]:
                        best[m] = (r["tokens_per_s"], b)
            print("| " + " | ".join(cells) + " |")
        print()
        for note in sorted(notes):
            print(note + "\n")
        fulls = [m for m in methods if m.startswith("full") and m in best]
        if fulls:
            f = max(fulls, key=lambda m: best[m][0])
            line = f"best within its cap: {f} {best[f][0]:.0f} tokens/s (batch {best[f][1]})"
            for m in methods:
                if m in best and not m.startswith("full"):
                    line += f"; {m} {best[m][0]:.0f} (batch {best[m][1]}, {best[m][0] / best[f][0]:.2f}x)"
            print(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
