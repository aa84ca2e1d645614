"""The offloaded rows of docs/performance.md's "The paper's setting" recounted under one timing rule
(issue 40 #1): a step's time is everything it causes before the next step can start, so the cache
admission that runs after the step (`admit_us`, serial in these runs) is counted, and the "GPU phases only"
row sums every GPU phase (rank, estimate, gather, attend). From the raw reports committed in
docs/measurements/ (standard library only):

    PYTHONPATH=python python3 -m retro_bench.gpu.recount_offloaded [--fourth RUN1_REPORT] [--second RUN2_REPORT]

Attention-only decode throughput per GPU = batch / (32 layers x layer step); full attention's batch is
capped at 7 by GPU memory at 128K (Llama-3-8B on an H200), its time scaled from its batch-8 row.
"""
import argparse
import json
import os

ROOT = os.getcwd()  # the repository root: paths below are relative to it (retro_bench.doc_tables runs there)
FOURTH = "docs/measurements/h200-2026-11-27d/run1/wave/gpu-report.json"
SECOND = "docs/measurements/h200-2026-11-27b/run2/wave/gpu-report.json"
LAYERS, CONTEXT, FULL_CAP = 32, 131072, 7


def rows(path):
    with open(path) as f:
        return {(r["method"], r["batch"]): r for r in json.load(f)["wave_run"]
                if r["status"] == "ok" and r["context"] == CONTEXT}


def tokens_per_s(batch, step_us):
    return batch / (LAYERS * step_us * 1e-6)


def full_capped(r, method):
    """The memory-capped full row: batch 8's step scaled to batch 7 (linear in batch from 8 on)."""
    step = r[(method, 8)]["step_us"] * FULL_CAP / 8
    return step, tokens_per_s(FULL_CAP, step)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fourth", default=FOURTH, help="the fourth lease's run 1 report (full-cudnn, wave offloaded)")
    ap.add_argument("--second", default=SECOND, help="the second lease's run 2 report (full FlashInfer, wave)")
    a = ap.parse_args()

    r4 = rows(a.fourth)
    step, base = full_capped(r4, "full-cudnn")
    print(f"fourth lease ({os.path.relpath(a.fourth, ROOT)}), 128K, over full-cudnn at batch {FULL_CAP} "
          f"({step:.1f} us, {base:.1f} tokens/s):\n")
    print("| batch | wave step | admission | step + admission | tokens/s | vs full: printed before | counted |")
    print("|---|---|---|---|---|---|---|")
    for b in (8, 32, 64):
        w = r4[("wave", b)]
        both = w["step_us"] + w["admit_us"]
        print(f"| {b} | {w['step_us']:,.1f} us | {w['admit_us']:,.1f} us | {both:,.1f} us | "
              f"{tokens_per_s(b, both):.1f} | {tokens_per_s(b, w['step_us']) / base:.2f}x | "
              f"**{tokens_per_s(b, both) / base:.2f}x** |")

    r2 = rows(a.second)
    step2, base2 = full_capped(r2, "full")
    w = r2[("wave", 32)]
    without_est = w["select_us"] + w["gather_us"] + w["attend_us"]
    phases = without_est + w["estimate_us"]
    print(f"\nsecond lease ({os.path.relpath(a.second, ROOT)}), 128K batch 32, over full (FlashInfer) at batch "
          f"{FULL_CAP} ({step2:.1f} us, {base2:.1f} tokens/s):\n")
    print(f"- GPU phases without the estimate (rank {w['select_us']:.1f} + gather {w['gather_us']:.1f} + attend "
          f"{w['attend_us']:.1f} = {without_est:.1f} us): {tokens_per_s(32, without_est) / base2:.2f}x (printed before)")
    print(f"- every GPU phase (+ estimate {w['estimate_us']:.1f} = {phases:.1f} us): "
          f"**{tokens_per_s(32, phases) / base2:.2f}x**; the whole step with its admission "
          f"({w['step_us']:.1f} + {w['admit_us']:.1f} us): {tokens_per_s(32, w['step_us'] + w['admit_us']) / base2:.2f}x")


if __name__ == "__main__":
    main()
