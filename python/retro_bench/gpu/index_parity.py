"""Wave's index built on the GPU against the CPU build, on the same synthetic layers (issue 40 #3's criterion:
recall and out_err within 1% of the CPU build on the same trace). Per context, the batch-1 wave rows' recall@100
and out_err (retro_gpu_check evaluates every timed step of batch 1 against exact attention) of a run whose
index came from segmented_kmeans_gpu beside those of runs whose index came from the CPU's k-means
(lib/cluster), and each one's relative difference.

    PYTHONPATH=python python3 -m retro_bench.gpu.index_parity --gpu REPORT [REPORT ...] --cpu REPORT [REPORT ...]
        [--method wave-hbm] [--tolerance 0.01]

Each REPORT is a retro_gpu_check gpu-report.json; several may be given for a side where the contexts ran in
separate processes (their rows are pooled, a context given twice refused). The GPU side's "wave_run_options"
must say kmeans "gpu" and every CPU report's "cpu"; both sides must have evaluated the same window (steps,
warm_steps; batch 1 runs sequence 0 alone, whatever the run's sequences), else the comparison is refused: a
different window is a different set of queries.
Reports before 2026-11-30 lack "wave_run_options" and are refused. Prints Markdown; exit 0 when every
context present on both sides is within the tolerance, 1 when one is not, 2 on unusable input.
"""
import argparse
import json
import sys

from retro_bench.gpu.summary_table import ctx_name

# what the batch-1 rows are evaluated over (batch 1 runs sequence 0 alone, whatever --sequences says)
WINDOW = ("steps", "warm_steps")


class Unusable(Exception):
    pass


def load(paths, kmeans, method):
    """{context: (recall, out_err)} of the batch-1 `method` rows pooled over `paths`, and their window."""
    rows, window = {}, None
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        opts = report.get("wave_run_options")
        if opts is None:
            raise Unusable(f"{path}: no \"wave_run_options\" (a report before 2026-11-30, or one whose wave run failed: "
                           f"{report.get('wave_run_error', 'no wave_run_error either')}): its index's k-means is unknown")
        if opts.get("kmeans") != kmeans:
            raise Unusable(f"{path}: its wave index was built by the {opts.get('kmeans')} k-means; expected {kmeans}")
        w = tuple(opts.get(k) for k in WINDOW)
        if not all(isinstance(x, int) for x in w):
            raise Unusable(f"{path}: \"wave_run_options\" lacks {', '.join(WINDOW)} as integers: {opts}")
        if window is not None and w != window:
            raise Unusable(f"{path}: evaluated over {dict(zip(WINDOW, w))}, the other {kmeans} reports over "
                           f"{dict(zip(WINDOW, window))}")
        window = w
        for r in report.get("wave_run", []):
            if r.get("method") != method or r.get("batch") != 1 or r.get("status") != "ok" or "context" not in r:
                continue
            rec, err = r.get("recall@100"), r.get("out_err")
            if rec is None or err is None:
                continue
            if r["context"] in rows:
                raise Unusable(f"{path}: context {r['context']} of {method} given twice on the {kmeans} side")
            rows[r["context"]] = (float(rec), float(err))
    return rows, window


def rel(a, b):
    """|a - b| / |b| (b the CPU build's value); 0 where both are 0."""
    return abs(a - b) / abs(b) if b else (0.0 if a == b else float("inf"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", nargs="+", required=True, metavar="REPORT",
                    help="gpu-report.json(s) of the run(s) whose wave index was built on the GPU")
    ap.add_argument("--cpu", nargs="+", required=True, metavar="REPORT",
                    help="gpu-report.json(s) of the run(s) whose index was built by the CPU's k-means")
    ap.add_argument("--method", default="wave-hbm", help="the wave row compared (default wave-hbm: the KV in HBM)")
    ap.add_argument("--tolerance", type=float, default=0.01, help="relative difference allowed (default 0.01)")
    a = ap.parse_args(argv)
    try:
        gpu, gw = load(a.gpu, "gpu", a.method)
        cpu, cw = load(a.cpu, "cpu", a.method)
        if gw != cw:
            raise Unusable(f"the GPU build was evaluated over {dict(zip(WINDOW, gw))}, the CPU build over "
                           f"{dict(zip(WINDOW, cw))}: not the same queries")
        both = sorted(set(gpu) & set(cpu))
        if not both:
            raise Unusable(f"no context has a batch-1 {a.method} row with recall and out_err on both sides "
                           f"(GPU: {sorted(gpu)}, CPU: {sorted(cpu)})")
    except (Unusable, OSError, json.JSONDecodeError) as e:
        print(f"index_parity: {e}", file=sys.stderr)
        return 2
    steps, warm = gw
    print(f"{a.method}, batch 1, {steps - warm} evaluated steps after {warm}; tolerance {a.tolerance:.0%} relative.\n")
    print("| context | recall@100: GPU build | CPU build | difference | out_err: GPU build | CPU build | difference | "
          f"within {a.tolerance:.0%} |")
    print("|---|---|---|---|---|---|---|---|")
    ok = True
    for c in both:
        (gr, ge), (cr, ce) = gpu[c], cpu[c]
        dr, de = rel(gr, cr), rel(ge, ce)
        within = dr <= a.tolerance and de <= a.tolerance
        ok &= within
        print(f"| {ctx_name(c)} | {gr:.4f} | {cr:.4f} | {dr:.2%} | {ge:.4f} | {ce:.4f} | {de:.2%} | "
              f"{'yes' if within else 'no'} |")
    missing = sorted(set(gpu) ^ set(cpu))
    if missing:
        print(f"\n(on one side only: {', '.join(ctx_name(c) for c in missing)})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
