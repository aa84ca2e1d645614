"""One table of a GPU run: PyTorch SDPA (best backend), the library full attention (FlashInfer), cuDNN's
fused attention where the report has it, the own kernel and wave per (context, batch), with HBM fractions,
wave's phases and measured / model (the roofline; with the calibrated phase model's in brackets where the
report has it, * marking the points it was fitted to). wave is the clustered KV in pinned host memory (misses over PCIe, the
paper's setting); wave-hbm, where the report has it, the same in device memory (within GPU memory). A
speed-up is over the report's baseline, the fastest full row at its point; the cell names it when that is
not FlashInfer (reports before cuDNN's row always used FlashInfer). The seed baselines on the GPU (quest, and
pq / magicpig / the CPU-index methods where a report has them: issue 41 #3) get a column each with their speed-up over full, and the
last column is wave (offloaded; else wave in HBM) against the fastest of them at the same point, the
comparison of RetroInfer's Figure 12 (its paper: 3.3-22.8x the sparse systems' throughput) — a point a
baseline cannot hold in memory shows its "does not fit" as "-".

    PYTHONPATH=python python3 -m retro_bench.gpu.summary_table GPU_REPORT.json [GPU_REPORT.json ...] [--sdpa SDPA.json]
                                         [--peak-GBps 3350]

GPU_REPORT.json: retro_gpu_check's report with "wave_run" rows (several: their rows are joined), or a results
directory of `retro-bench run` with "backend": "cuda" (its runs.jsonl: the same table from the runner's
records, issue 41 #1 — full's kernel and wave's KV placement name the rows as the driver does, the speed-ups
over the fastest full row at each point);
SDPA.json: python/retro_bench/gpu/sdpa_baseline.py's output. HBM % = K+V bytes / time / the peak given (default:
none, then the fraction of the measured D2D ceiling the report carries). Prints Markdown.
"""
import argparse
import json
import os
import sys

from retro_bench.runs_file import read_runs


FULL_KERNEL_ROWS = {"flashinfer": "full", "cudnn": "full-cudnn", "own": "full-own"}


def record_method(r):
    """A cuda record's row name, as the driver names its rows: full by its kernel, wave by its KV placement and
    lookups (and the cache's update and presence on the device path), pq by its KV placement, the others by
    the method."""
    method, c = r["method"], r.get("cuda", {})
    if method == "full":
        return FULL_KERNEL_ROWS.get(c.get("kernel", "flashinfer"), "full")
    if method == "pq":  # records before 2026-11-29 have no kv: PQCache's KV was in HBM then
        if c.get("kv", "gpu") == "gpu":
            return "pq-hbm"
        return "pq-async" if c.get("update") == "async" else "pq"
    if method != "wave":
        return method
    if c.get("kv") == "gpu":
        return "wave-hbm" if c.get("lookups", "device") == "device" else "wave-hbm-host"
    if c.get("lookups") != "device":  # records before 2026-11-29 have none: the host path
        return "wave"
    sysp = r.get("system") or {}
    if c.get("update") == "async":
        return "wave-dev-async"
    return "wave-dev-nocache" if sysp.get("cache") == 0 and not sysp.get("cache_bytes") else "wave-dev"


def record_rows(path):
    """The rows of a cuda results directory's records, in the driver's row format."""
    rows = []
    for r in read_runs(path):
        if r.get("backend") != "cuda":
            continue
        m, c = r["metrics"], r.get("cuda", {})
        mean = lambda k: m.get(k, {}).get("mean") or 0.0  # noqa: E731
        method = record_method(r)
        total = c.get("phases", {}).get("total", {}) or c.get("phases", {}).get("step", {})
        row = {"method": method, "context": r["prompt_len"], "batch": r["batch"], "status": "ok",
               "step_us": mean("gpu_step_us"), "total_us": mean("gpu_total_us") or mean("gpu_step_us") + mean("gpu_admit_us"),
               "admit_us": mean("gpu_admit_us"), "measured_over_model": total.get("measured_over_model")}
        for k in ("select_us", "estimate_us", "gather_us", "attend_us", "host_us"):
            row[k] = mean("gpu_" + k)
        rows.append(row)
    best = {}  # the fastest full row per point: the speed-ups' baseline, as the driver sets them
    for row in rows:
        if row["method"].startswith("full"):
            key = (row["context"], row["batch"])
            if key not in best or row["total_us"] < best[key]["total_us"]:
                best[key] = row
    for row in rows:
        b = best.get((row["context"], row["batch"]))
        if b and row is not b and row["total_us"] > 0:
            row["speedup_vs_full"], row["baseline"] = b["total_us"] / row["total_us"], b["method"]
    return rows


def load_rows(paths):
    rows = []
    for p in paths:
        if os.path.isdir(p):
            rows += record_rows(p)
            continue
        with open(p) as f:
            rows += json.load(f).get("wave_run", [])
    return rows


def best_sdpa(path):
    """The fastest SDPA row per (context, batch) of sdpa_baseline's file; {} when there is none (no path, or
    a run without PyTorch or cut by its time limit wrote no file: the table then has no SDPA column's
    values, said on stderr)."""
    if not path:
        return {}
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        print(f"summary_table: no SDPA rows ({path}: {e})", file=sys.stderr)
        return {}
    best = {}
    for r in data.get("rows", []):
        if r.get("status") != "ok":
            continue
        key = (r["context"], r["batch"])
        if key not in best or r["us"] < best[key]["us"]:
            best[key] = r
    return best


def frac(bytes_, us, peak_Bps, fallback):
    if peak_Bps and bytes_ and us:
        return f"{100 * bytes_ / (us * 1e-6) / peak_Bps:.0f}%"
    return f"{100 * fallback:.0f}% of D2D" if fallback else "-"


# wave's rows, in column order, and their names: the KV in pinned host memory through the host's lookups (the
# paper's path), through the cache's table on the GPU (its update after the step, at the next step, or no
# cache: Figure 15's ablation), in device memory on the device alone or through the host's lookups
WAVES = ("wave", "wave-dev", "wave-dev-async", "wave-dev-nocache", "wave-hbm", "wave-hbm-host")
WAVE_NAMES = {"wave": "wave", "wave-dev": "wave, device lookups", "wave-dev-async": "wave, device lookups, async update",
              "wave-dev-nocache": "wave, device lookups, no cache", "wave-hbm": "wave, KV in HBM",
              "wave-hbm-host": "wave, KV in HBM, host lookups"}

# the seed baselines' rows of retro_gpu_check's wave-vs-full run, in column order
SPARSE = {"quest": "Quest", "pq": "PQCache", "pq-async": "PQCache, async update", "pq-hbm": "PQCache, KV in HBM", "magicpig": "MagicPIG", "faiss_flat": "FAISS flat", "faiss_ivf": "FAISS IVF",
          "faiss_hnsw": "FAISS HNSW", "retrieval_attention": "RetrievalAttention"}


def step_us(r):
    """A row's step under the one timing rule: with its admission (total_us) where the report has it."""
    return r.get("total_us") or r["step_us"]


def ctx_name(n):
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--sdpa")
    ap.add_argument("--peak-GBps", type=float, default=0.0)
    a = ap.parse_args(argv)
    rows = load_rows(a.reports)
    sdpa = best_sdpa(a.sdpa)
    peak = a.peak_GBps * 1e9
    by = {}
    for r in rows:
        if r.get("status") == "ok":
            by[(r["method"], r["context"], r["batch"])] = r
    points = sorted({(r["context"], r["batch"]) for r in rows} | set(sdpa))
    waves = [m for m in WAVES if any(k[0] == m for k in by)] or ["wave"]
    fulls = [m for m in ("full", "full-cudnn", "full-own") if m != "full-cudnn" or any(k[0] == m for k in by)]
    full_names = {"full": "full (FlashInfer)", "full-cudnn": "full (cuDNN)", "full-own": "full (own kernel)"}
    head = ["context", "batch", "torch SDPA (best)"] + [full_names[m] for m in fulls]
    names = WAVE_NAMES
    for m in waves:
        head += [names[m], f"{names[m]} vs full"]
    sparse = [m for m in SPARSE if any(k[0] == m for k in by)]
    for m in sparse:
        head += [SPARSE[m], f"{SPARSE[m]} vs full"]
    for m in waves:
        head += [f"{names[m]}: rank / estimate / gather / attend / host (us)", f"{names[m]}: measured / model"]
    if sparse:
        head.append("wave vs the fastest sparse baseline")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for n, b in points:
        cells = [ctx_name(n), str(b)]
        s = sdpa.get((n, b))
        cells.append(f"{s['us']:.1f} us ({s['backend']}, {frac(s['kv_bytes'], s['us'], peak, s.get('hbm_frac', 0))})"
                     if s else "-")
        for m in fulls:
            r = by.get((m, n, b))
            cells.append(f"{r['step_us']:.1f} us ({frac(r.get('kv_bytes'), r['step_us'], peak, r.get('hbm_frac'))})"
                         if r else "-")
        for m in waves:
            w = by.get((m, n, b))
            # the step with its admission (total_us, the one timing rule) where the report has it
            cells.append((f"{w.get('total_us', w['step_us']):.1f} us" +
                          (f" ({w['step_us']:.1f} + {w['admit_us']:.1f} admission)" if w.get('total_us') and w.get('admit_us') else ""))
                         if w else "-")
            over = f" (over {w['baseline']})" if w and w.get("baseline", "full") != "full" else ""
            cells.append(f"{w['speedup_vs_full']:.2f}x{over}" if w and w.get("speedup_vs_full") else "-")
        for m in sparse:
            r = by.get((m, n, b))
            cells.append(f"{step_us(r):.1f} us" if r else "-")
            cells.append(f"{r['speedup_vs_full']:.2f}x" if r and r.get("speedup_vs_full") else "-")
        for m in waves:
            w = by.get((m, n, b))
            cells.append(" / ".join(f"{w[k]:.0f}" for k in ("select_us", "estimate_us", "gather_us", "attend_us",
                                                             "host_us")) if w else "-")
            cell = f"{w['measured_over_model']:.2f}" if w and w.get("measured_over_model") else "-"
            if w and w.get("measured_over_cal_model"):  # the calibrated phase model, * = a calibration point
                cell += f" (calibrated {w['measured_over_cal_model']:.2f}{'*' if w.get('calibration_point') else ''})"
            cells.append(cell)
        if sparse:
            w = next((by[(m, n, b)] for m in waves if (m, n, b) in by), None)
            best = min((by[(m, n, b)] for m in sparse if (m, n, b) in by), key=step_us, default=None)
            cells.append(f"{step_us(best) / step_us(w):.2f}x (over {best['method']})" if w and best else "-")
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
