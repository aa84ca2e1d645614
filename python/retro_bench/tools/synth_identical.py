"""Proves that a change to the synthetic-trace generator (lib/trace/synth*) leaves its output bit-identical.

Generates a fixed set of synthetic traces with `retro-bench synth` that together exercise every stage of
the generator (both presets and sink modes, needles and needle spans, key-mean jitter, a long recency
span, diffuse and sink-free layers, no sinks, no prefill queries, tiny heads, float32 and float16
storage), then either stores them as the reference (--make-ref) or compares them with a stored reference:
every dataset byte for byte (same dtype, shape and bits) and every attribute of every object.

    # before the change, with the old binary:
    $RETRO_PYTHON python/retro_bench/tools/synth_identical.py --bin build/retro-bench --ref /tmp/synth-ref --make-ref
    # after it, with the new one:
    $RETRO_PYTHON python/retro_bench/tools/synth_identical.py --bin build/retro-bench --ref /tmp/synth-ref

Keep the reference outside the repository (the files are tens of MiB). Exit status 0 = identical.
Needs numpy and h5py: run it with /usr/bin/python3 ($RETRO_PYTHON from scripts/env.sh).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

# name -> retro-bench synth arguments (after the output path)
CASES = {
    # default llama3-8b preset (offset sinks, needles of one token), float32 so the comparison sees
    # every bit the generator computes
    "llama_f32": ["--prompt-len", "4096", "--steps", "16", "--dtype", "float32"],
    # the same in the default float16 storage (the writer's conversion)
    "llama_f16": ["--prompt-len", "4096", "--steps", "16"],
    # smollm2 preset: sink_mode mean, key_mean_jitter, recency_span_factor 64, diffuse layer 0,
    # sink_onset 0.4 (layers 0-1 without sinks)
    "smollm2": ["--preset", "smollm2", "--prompt-len", "2048", "--steps", "16", "--layers", "5",
                "--prefill-queries", "32", "--dtype", "float32"],
    # needle passages targeted by every head, offset sinks, jitter, a longer recency span, a diffuse
    # layer, other seed and shape
    "needles": ["--prompt-len", "3000", "--steps", "12", "--layers", "3", "--prefill-queries", "24",
                "--dtype", "float32", "--seed", "7",
                "--set", "num_q_heads=8", "--set", "num_kv_heads=2", "--set", "head_dim=64",
                "--set", "num_needles=6", "--set", "needle_span=4", "--set", "needle_rate=0.2",
                "--set", "needle_head_fraction=1.0", "--set", "key_mean_jitter=0.2",
                "--set", "recency_span_factor=16", "--set", "diffuse_layers=1", "--set", "sink_tokens=2",
                "--set", "vocab_size=512", "--set", "gqa_shared=0.3"],
    # sink_mode mean on the llama shape with no sink tokens, no prefill queries, no needles
    "mean_nosink": ["--prompt-len", "2500", "--steps", "9", "--prefill-queries", "0", "--dtype", "float32",
                    "--seed", "3", "--set", "sink_mode=mean", "--set", "sink_tokens=0",
                    "--set", "num_needles=0", "--set", "key_mean_jitter=0.3", "--set", "num_kv_heads=4",
                    "--set", "num_q_heads=8"],
    # tiny heads (head_dim 16): the calibration's caps on unreachable targets
    "tiny_heads": ["--prompt-len", "2000", "--steps", "3", "--layers", "1", "--dtype", "float32",
                   "--set", "num_q_heads=4", "--set", "num_kv_heads=2", "--set", "head_dim=16",
                   "--set", "local_mass_min=0.9", "--set", "local_mass_max=0.95"],
}


def generate(binary, out_dir):
    for name, args in CASES.items():
        path = os.path.join(out_dir, name + ".h5")
        subprocess.run([binary, "synth", path, *args], check=True, stdout=subprocess.DEVNULL)


def attrs_equal(a, b):
    if set(a.keys()) != set(b.keys()):
        return False
    for k in a.keys():
        x, y = a[k], b[k]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not np.array_equal(np.asarray(x), np.asarray(y)):
                return False
        elif x != y:
            return False
    return True


def compare_file(ref_path, new_path):
    """Returns (list of differences, number of datasets compared, bytes compared)."""
    diffs, n_sets, n_bytes = [], 0, 0
    with h5py.File(ref_path, "r") as r, h5py.File(new_path, "r") as n:
        names_r, names_n = [], []
        r.visit(names_r.append)
        n.visit(names_n.append)
        if sorted(names_r) != sorted(names_n):
            diffs.append(f"objects differ: {sorted(set(names_r) ^ set(names_n))}")
        if not attrs_equal(r.attrs, n.attrs):
            diffs.append("root attributes differ")
        for name in sorted(set(names_r) & set(names_n)):
            a, b = r[name], n[name]
            if not attrs_equal(a.attrs, b.attrs):
                diffs.append(f"{name}: attributes differ")
            if isinstance(a, h5py.Dataset):
                x, y = a[()], b[()]
                n_sets += 1
                n_bytes += x.nbytes
                if x.dtype != y.dtype or x.shape != y.shape:
                    diffs.append(f"{name}: {x.dtype}{x.shape} vs {y.dtype}{y.shape}")
                elif x.tobytes() != y.tobytes():
                    bad = np.count_nonzero(x.view(np.uint8) != y.view(np.uint8))
                    diffs.append(f"{name}: {bad} of {x.nbytes} bytes differ")
    return diffs, n_sets, n_bytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="retro-bench binary")
    ap.add_argument("--ref", required=True, help="reference directory (outside the repository)")
    ap.add_argument("--make-ref", action="store_true", help="write the reference instead of comparing")
    a = ap.parse_args()
    if a.make_ref:
        os.makedirs(a.ref, exist_ok=True)
        generate(a.bin, a.ref)
        print(f"reference written: {len(CASES)} traces in {a.ref}")
        return 0
    failed = False
    with tempfile.TemporaryDirectory(prefix="synth-new-") as tmp:
        generate(a.bin, tmp)
        for name in CASES:
            ref = os.path.join(a.ref, name + ".h5")
            if not os.path.exists(ref):
                print(f"{name}: no reference {ref} (run with --make-ref first)")
                failed = True
                continue
            diffs, n_sets, n_bytes = compare_file(ref, os.path.join(tmp, name + ".h5"))
            status = "IDENTICAL" if not diffs else "DIFFERENT"
            print(f"{name:12s} {status}: {n_sets} datasets, {n_bytes} bytes, all attributes")
            for d in diffs:
                print("   ", d)
            failed |= bool(diffs)
    print("all traces bit-identical" if not failed else "traces differ")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
