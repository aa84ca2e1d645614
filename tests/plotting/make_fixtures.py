#!/usr/bin/python3
"""Regenerates tests/plotting/fixtures/ from real result directories, trimmed to stay small.

    build/retro-bench run configs/quickstart.json --results /tmp/fx
    for c in wave-zones wave-estimation wave-segments wave-updates wave-cache throughput baselines2; do
        build/retro-bench run configs/paper/$c.json --results /tmp/fx; done
    build/retro-bench inspect datasets/generated/synth-llama3-16k.h5 --step-stride 8 --json /tmp/fx/inspect16k.json
    T=datasets/generated/synth-llama3-32k-l1.h5; mkdir -p /tmp/fx/trace-figures
    for i in ivf hnsw; do build/retro-bench ood-recall $T --index $i --kv-heads 0,1 --json /tmp/fx/trace-figures/ood-recall-$i.json; done
    /usr/bin/python3 tests/plotting/make_fixtures.py /tmp/fx
    /usr/bin/python3 tests/plotting/make_fixtures.py --gpu /work/shared/measurements/h200-2026-11-27
    /usr/bin/python3 tests/plotting/make_fixtures.py --closed-loop DIR...   # closed-loop results directories

`--closed-loop DIR...` copies closed-loop results directories (docs/closed-loop.md) as fixtures named
closed-loop-<model>: manifest.json, runs.jsonl, cases.csv and the part files parts/<run>/<case>.json (not the
reference's log-probability .npy, prefill/ or prompts/), numbers rounded. fixtures/closed-loop-tiny and
fixtures/closed-loop-smollm2 are two real runs of scripts/closedloop/closed_loop.py (revision 63b054e) with
the same "cases" file: token-id prompts of 200 and 400 tokens (2 fidelity lines of 8 continuation tokens
and 3 task lines of 4 greedy tokens at each length), streaming sink 4 + window 8 / 32 and oracle_topk
k = 12 / 36, on the tiny random Llama and on SmolLM2-135M (GGUF; 2 min). The prompts are random token ids,
so the task answers were taken from a first run: each task line's answer is the reference's own first
generated token (line -0) or first three (lines -1, -2), "contains" scoring; the second run (these files)
scores every method against them. The commands: tests/plotting/fixtures/closed-loop-tiny/README.md.

`--gpu DIR` makes the two GPU-run fixtures from a `"backend": "cuda"` run's retro-bench-cuda-runs.jsonl and
retro-bench-cuda-manifest.json (the first H200 run of configs/gpu/wave-vs-full.json, revision c8c9759, before full
attention had a kernel choice: its full runs are the project's own kernel): `gpu-run/` = its records at batch 1, 8
and 64 (both contexts, full and wave), whole and unchanged but for the rounding, with its manifest; `gpu-run-kernels/`
= the same records in the form a run with `"full_kernel": ["flashinfer", "own"]` writes: each full record twice, as
`cuda.kernel` "own" (the measured record, label `@cuda(batch=B,kernel=own)`) and as "flashinfer" (an EDITED copy:
gpu_step_us / gpu_attend_us and the summary's measured times divided by 3, a new run id; not a measurement), with the
manifest's resolved runs, indices and trace run lists redone in the tool's order (batch, then kernel).

Trimming: numbers rounded to 6 significant digits (per_head.csv 5, parts 4); per_head.csv keeps query heads < 8 (quickstart: layers 0
and 1) or < 4; parts/ kept only for wave-updates (the per-step figure needs them); wave-cache (without its FIFO and CLOCK runs),
throughput and baselines2 keep only the metrics the figures read; the inspect JSON keeps query heads < 8; the ood-recall JSONs
(RESULTS/trace-figures/ood-recall-{ivf,hnsw}.json from scripts/paper-figures.sh) drop their per-head curves. The ood-recall fixture is hand-written (fixtures/ood/), not produced here.
"""
import csv
import glob
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")


def rnd(x, digits=6):
    if isinstance(x, float):
        return float(f"{x:.{digits}g}")
    if isinstance(x, dict):
        return {k: rnd(v, digits) for k, v in x.items()}
    if isinstance(x, list):
        return [rnd(v, digits) for v in x]
    return x


def rnd_cell(c):
    try:
        v = float(c)
    except ValueError:
        return c
    return c if c.lstrip("-").isdigit() else f"{v:.5g}"


def dump(obj, path, lines=False, compact=False):
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(rnd(obj), f, separators=(",", ":"), sort_keys=True)
            f.write("\n")
        elif lines:
            for o in obj:
                f.write(json.dumps(rnd(o), separators=(",", ":"), sort_keys=True) + "\n")
        else:
            json.dump(rnd(obj), f, indent=1, sort_keys=True)
            f.write("\n")


KEEP_METRICS = ("recall@100", "mass", "out_err", "exact_frac", "scan_ops", "h2d_bytes", "fetch_bytes", "cache_hit",
                "gpu_bytes", "build_ms")


def slim(run):
    """Only the metrics the figures read, no per-layer means (large sweeps)."""
    run = dict(run)
    run["metrics"] = {k: {s: x for s, x in v.items() if s in ("mean", "p50", "p90", "count")}
                      for k, v in run["metrics"].items() if k in KEEP_METRICS}
    run.pop("per_layer", None)
    return run


def trim(src, name, max_qhead, parts=False, slim_runs=False, keep=None):
    s, d = os.path.join(src, name), os.path.join(OUT, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    with open(os.path.join(s, "manifest.json"), encoding="utf-8") as f:
        dump(json.load(f), os.path.join(d, "manifest.json"), compact=slim_runs)
    with open(os.path.join(s, "runs.jsonl"), encoding="utf-8") as f:
        runs = [json.loads(l) for l in f if l.strip()]
    if keep:
        runs = [r for r in runs if keep(r)]
    if slim_runs:
        runs = [slim(r) for r in runs]
    kept = {r["run_id"] for r in runs}
    dump(runs, os.path.join(d, "runs.jsonl"), lines=True)
    with open(os.path.join(s, "per_head.csv"), newline="", encoding="utf-8") as f, \
            open(os.path.join(d, "per_head.csv"), "w", newline="", encoding="utf-8") as g:
        r = csv.reader(f)
        w = csv.writer(g, lineterminator="\n")
        head = next(r)
        w.writerow(head)
        qi = head.index("q_head")
        for row in r:
            if int(row[qi]) < max_qhead and row[0] in kept:
                w.writerow([rnd_cell(c) for c in row])
    if parts:
        copy_parts(s, d, 4)


def copy_parts(src, dst, digits):
    """parts/<run>/<name>.json of a results directory, numbers rounded to `digits`, compact."""
    for p in sorted(glob.glob(os.path.join(src, "parts", "*", "*.json"))):
        rel = os.path.relpath(p, src)
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        with open(p, encoding="utf-8") as f:
            obj = json.load(f)
        with open(os.path.join(dst, rel), "w", encoding="utf-8") as g:
            json.dump(rnd(obj, digits), g, separators=(",", ":"), sort_keys=True)


def main(src):
    trim(src, "quickstart", 8)
    for n in ("wave-zones", "wave-estimation", "wave-segments"):
        trim(src, n, 4)
    trim(src, "wave-updates", 4, parts=True)
    trim(src, "wave-cache", 1, slim_runs=True, keep=lambda r: "policy=fifo" not in r["label"]
         and "policy=clock" not in r["label"])
    trim(src, "throughput", 2, slim_runs=True)
    trim(src, "baselines2", 2, slim_runs=True)
    tf = os.path.join(OUT, "trace-figures")
    os.makedirs(tf, exist_ok=True)
    for idx in ("ivf", "hnsw"):
        with open(os.path.join(src, "trace-figures", f"ood-recall-{idx}.json"), encoding="utf-8") as f:
            obj = json.load(f)
        obj.pop("heads", None)  # per-head curves: the figure uses the means
        dump(obj, os.path.join(tf, f"ood-recall-{idx}.json"))
    insp = os.path.join(src, "inspect16k.json")
    if os.path.exists(insp):
        with open(insp, encoding="utf-8") as f:
            obj = json.load(f)
        obj["heads"] = [h for h in obj["heads"] if h["q_head"] < 8]
        dump(obj, os.path.join(OUT, "inspect-synth-llama3-16k.json"))


GPU_BATCHES = (1, 8, 64)
FLASHINFER_EDIT = 3.0  # gpu-run-kernels: the edited "flashinfer" copies' times = the own kernel's / this


def _gpu_source(src):
    with open(os.path.join(src, "retro-bench-cuda-manifest.json"), encoding="utf-8") as f:
        man = json.load(f)
    with open(os.path.join(src, "retro-bench-cuda-runs.jsonl"), encoding="utf-8") as f:
        runs = [json.loads(l) for l in f if l.strip()]
    return man, [r for r in runs if r["batch"] in GPU_BATCHES]


def _write_gpu(name, man, runs):
    d = os.path.join(OUT, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    dump(man, os.path.join(d, "manifest.json"), compact=True)
    dump(runs, os.path.join(d, "runs.jsonl"), lines=True)


def _as_flashinfer(r):
    """An edited copy of an own-kernel full record standing for the library kernel: step and attention
    (the whole step of full attention) divided by FLASHINFER_EDIT; the cost model's terms unchanged."""
    import copy
    import hashlib
    r = copy.deepcopy(r)
    for m in ("gpu_step_us", "gpu_attend_us"):
        r["metrics"][m] = {k: (v / FLASHINFER_EDIT if k != "count" else v) for k, v in r["metrics"][m].items()}
        r["per_layer"][m] = {k: v / FLASHINFER_EDIT for k, v in r["per_layer"][m].items()}
    for ph in ("attend", "step"):
        row = r["cuda"]["phases"][ph]
        row["measured_us"] /= FLASHINFER_EDIT
        row["measured_over_model"] = row["measured_us"] / row["model_us"] if row["model_us"] else None
    r["run_id"] = "full-" + hashlib.sha256((r["run_id"] + ":flashinfer").encode()).hexdigest()[:12]
    return r


def gpu(src):
    man, runs = _gpu_source(src)
    _write_gpu("gpu-run", man, runs)
    # the same run as configs/gpu/wave-vs-full.json now writes it: full's kernel a sweep axis
    import copy
    man = copy.deepcopy(man)
    for cfg in (man["config"], man["config_source"]):
        cfg["cuda"]["batch"] = list(GPU_BATCHES)
        cfg["cuda"]["full_kernel"] = ["flashinfer", "own"]
    resolved = []  # lib/bench/config.cpp: for each method point, system point, batch, kernel
    for c in man["config"]["runs"]:
        if c["batch"] not in GPU_BATCHES:
            continue
        for k in (("flashinfer", "own") if c["method"] == "full" else (None,)):
            resolved.append(dict(c, kernel=k) if k else dict(c))
    man["config"]["runs"] = resolved
    out = []
    for t, tr in enumerate(man["traces"]):
        tr["runs"] = []
        for j, c in enumerate(resolved):
            src_r = next(r for r in runs if r["trace"] == tr["path"] and r["method"] == c["method"]
                         and r["batch"] == c["batch"])
            r = copy.deepcopy(src_r) if c.get("kernel") != "flashinfer" else _as_flashinfer(src_r)
            if c.get("kernel"):
                r["cuda"]["kernel"] = c["kernel"]
                r["label"] = r["label"].replace(f"@cuda(batch={c['batch']})",
                                                f"@cuda(batch={c['batch']},kernel={c['kernel']})")
            r["index"] = t * len(resolved) + j
            tr["runs"].append({"label": r["label"], "run_id": r["run_id"]})
            out.append(r)
    _write_gpu("gpu-run-kernels", man, out)


CLOSED_LOOP_FIXTURES = {"tiny-random-llama": "closed-loop-tiny", "SmolLM2-135M-Instruct": "closed-loop-smollm2"}


def closed_loop(src):
    with open(os.path.join(src, "manifest.json"), encoding="utf-8") as f:
        man = json.load(f)
    model = man["model"]["name"].split(" (")[0]
    d = os.path.join(OUT, CLOSED_LOOP_FIXTURES.get(model, "closed-loop-" + model.lower()))
    readme = os.path.join(d, "README.md")
    keep = open(readme, encoding="utf-8").read() if os.path.exists(readme) else None
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    if keep:
        with open(readme, "w", encoding="utf-8") as f:
            f.write(keep)
    dump(man, os.path.join(d, "manifest.json"))
    with open(os.path.join(src, "runs.jsonl"), encoding="utf-8") as f:
        dump([json.loads(l) for l in f if l.strip()], os.path.join(d, "runs.jsonl"), lines=True)
    shutil.copy(os.path.join(src, "cases.csv"), os.path.join(d, "cases.csv"))
    copy_parts(src, d, 6)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--gpu":
        gpu(sys.argv[2])
    elif len(sys.argv) > 2 and sys.argv[1] == "--closed-loop":
        for src in sys.argv[2:]:
            closed_loop(src)
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/plotres")
