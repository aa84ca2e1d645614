"""The offloaded wave step against its bound (issue 40 #2's criterion): per wave row with the KV in pinned host
memory, the step under the one timing rule (total_us: the step and what its cache update costs on the stream)
beside the bound it is held to — its GPU phases (the ranking and the estimation, the attention) plus its miss
bytes at the device's measured pinned host-to-device rate — phase by phase, and their ratio. Issue 40 asks for
<= 1.15x at 128K, batch 32.

    PYTHONPATH=python python3 -m retro_bench.gpu.offload_bound REPORT.json [--target 1.15]

REPORT.json: retro_gpu_check's report with "wave_run" rows and "wave_run_model".h2d_pinned_bytes_per_s (the
rate its wave run measured; reports before 2026-11-29 lack it: --h2d-GBps gives one). The miss bytes are the
row's h2d_bytes (the KV of the cache misses for the batch, per layer step). Prints Markdown.
"""
import argparse
import json
import sys

from retro_bench.gpu.summary_table import ctx_name, step_us

# wave's rows with its KV in host memory, in column order (summary_table.WAVES without the HBM ones)
OFFLOADED_WAVES = (("wave", "host lookups (the paper's path)"), ("wave-dev", "device lookups"),
                   ("wave-dev-async", "device lookups, async update"), ("wave-dev-nocache", "device lookups, no cache"))


def rows_of(report, rate):
    """(context, batch, name, cells) per offloaded wave row of the report, in order."""
    out = []
    names = dict(OFFLOADED_WAVES)
    for r in report.get("wave_run", []):
        if r.get("status") != "ok" or r.get("method") not in names:
            continue
        total = step_us(r)
        select = r.get("select_us", 0.0) + r.get("estimate_us", 0.0)
        miss_us = r.get("h2d_bytes", 0.0) / rate * 1e6
        bound = select + r.get("attend_us", 0.0) + miss_us
        out.append((r["context"], r["batch"], names[r["method"]], total, select, r.get("gather_us", 0.0),
                    r.get("h2d_bytes", 0.0) / 1e6, miss_us, r.get("attend_us", 0.0), r.get("admit_us", 0.0),
                    r.get("host_us", 0.0), bound, total / bound if bound > 0 else float("nan")))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--target", type=float, default=1.15, help="the ratio the issue asks for (default 1.15)")
    ap.add_argument("--h2d-GBps", type=float, default=0.0, help="the rate, where the report has none")
    a = ap.parse_args(argv)
    with open(a.report) as f:
        report = json.load(f)
    rate = a.h2d_GBps * 1e9 or report.get("wave_run_model", {}).get("h2d_pinned_bytes_per_s") or 0.0
    if not rate > 0:
        print("offload_bound: the report has no measured h2d_pinned_bytes_per_s in wave_run_model; pass --h2d-GBps",
              file=sys.stderr)
        return 2
    rows = rows_of(report, rate)
    if not rows:
        print("offload_bound: no offloaded wave rows (wave, wave-dev, wave-dev-async, wave-dev-nocache) in the report",
              file=sys.stderr)
        return 2
    print(f"Bound = rank + estimate + attend + miss bytes at the measured pinned H2D rate ({rate / 1e9:.1f} GB/s); "
          f"step = the step and its admission (total_us); target <= {a.target:.2f}x.\n")
    head = ["context", "batch", "wave row", "step us", "rank + estimate us", "gather us", "miss MB", "miss us at rate",
            "attend us", "admission us", "host us", "bound us", "step / bound", f"<= {a.target:.2f}"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for n, b, name, total, select, gather, mb, miss, attend, admit, host, bound, ratio in rows:
        ok = "yes" if ratio <= a.target else "no"
        print(f"| {ctx_name(n)} | {b} | {name} | {total:.1f} | {select:.1f} | {gather:.1f} | {mb:.2f} | {miss:.1f} | "
              f"{attend:.1f} | {admit:.1f} | {host:.1f} | {bound:.1f} | {ratio:.2f}x | {ok} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
