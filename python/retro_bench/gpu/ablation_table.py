"""RetroInfer's Figure 15 as a table (issue 40 #2): wave with its KV in pinned host memory on the device path
(the GPU block cache's table on the GPU), per (context, batch), without a cache, with the cache updated
after each step, and with the update applied at the next step while the GPU ranks and estimates — each
row's layer step under the one timing rule (total_us: the step with what its update costs on the stream) and
its speed-up over the no-cache row; the paper's own path (host lookups, "wave") beside it where the report
has it. The paper's figure normalizes decode throughput to its no-cache bar; here the ratio is of layer-step
times at the same batch (throughput at a fixed batch is its inverse).

    PYTHONPATH=python python3 -m retro_bench.gpu.ablation_table REPORT.json|RESULTS_DIR [...]

REPORT.json: retro_gpu_check's report with "wave_run" rows (its wave-dev, wave-dev-nocache, wave-dev-async
rows); RESULTS_DIR: a cuda results directory of `retro-bench run` (records named by
summary_table.record_method). Prints Markdown.
"""
import argparse
import sys

from retro_bench.gpu.summary_table import ctx_name, load_rows, step_us

BARS = (("wave-dev-nocache", "no cache"), ("wave-dev", "cache, update after the step"),
        ("wave-dev-async", "cache, update at the next step"), ("wave", "the paper's path (host lookups)"))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("reports", nargs="+")
    a = ap.parse_args(argv)
    by = {(r["method"], r["context"], r["batch"]): r for r in load_rows(a.reports) if r.get("status") == "ok"}
    bars = [(m, name) for m, name in BARS if any(k[0] == m for k in by)]
    if not any(m == "wave-dev-nocache" for m, _ in bars):
        print("ablation_table: no wave-dev-nocache rows (retro_gpu_check's Figure 15 rows, or a results directory "
              "with a cache-0 device-path wave run)", file=sys.stderr)
        return 2
    head = ["context", "batch"] + [f"{name}: us (vs no cache)" for _, name in bars]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for n, b in sorted({(k[1], k[2]) for k in by if k[0] == "wave-dev-nocache"}):
        base = by[("wave-dev-nocache", n, b)]
        cells = [ctx_name(n), str(b)]
        for m, _ in bars:
            r = by.get((m, n, b))
            cells.append(f"{step_us(r):.1f} ({step_us(base) / step_us(r):.2f}x)" if r and step_us(r) > 0 else "-")
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
