"""Shared set-up of the Python binding's tests (tests/python/, docs/python.md): the module from the build
(PYTHONPATH=build/python, set by ctest), the retro-bench binary, and tiny synthetic traces made with
`retro-bench synth` in a temporary directory removed at exit."""

import atexit
import json
import os
import shutil
import subprocess
import tempfile


import retro_bench as rb  # noqa: F401  (re-exported for the tests)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("RETRO_BIN", os.path.join(ROOT, "build", "retro-bench"))

TMP = tempfile.mkdtemp(prefix="retro-pybind-test-")
atexit.register(shutil.rmtree, TMP, ignore_errors=True)


def make_trace(name="tiny.h5", prompt_len=600, steps=6, prefill_queries=48, dtype="float16", seed=3):
    """A one-layer SmolLM2-shaped trace (3 KV heads x group 3, head_dim 64)."""
    path = os.path.join(TMP, name)
    if not os.path.exists(path):
        subprocess.run([BIN, "synth", path, "--preset", "smollm2", "--layers", "1", "--prompt-len", str(prompt_len),
                        "--steps", str(steps), "--prefill-queries", str(prefill_queries), "--dtype", dtype,
                        "--seed", str(seed)], check=True, capture_output=True, text=True)
    return path


def run_config(name, trace, methods, recall_k=(10, 32)):
    """Runs `retro-bench run` on `trace` with `methods` ([{"name", "params"}]); returns the results dir."""
    cfg = {"name": name, "traces": [trace], "steps": "all", "metrics": {"recall_k": list(recall_k)},
           "threads": 1, "methods": methods}
    cfg_path = os.path.join(TMP, name + ".json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    results = os.path.join(TMP, "results")
    p = subprocess.run([BIN, "run", cfg_path, "--results", results], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"retro-bench run failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return os.path.join(results, name)


def replay(trace, layer, kv_head, method, params, steps=None, **kw):
    """Builds `method` on the head's prompt and attends every decode step as the runner does: the step's
    own token appended first. Yields (step, head dict, attend result, reference out, reference lse)."""
    h = trace.read_head(layer, kv_head)
    P, S = h["prompt_len"], h["num_steps"]
    m = rb.HeadMethod(method, params, h["head_dim"], h["group"], layer=layer, kv_head=kv_head,
                      storage=trace.info["dtype"], **kw)
    m.build(h["keys"][:P], h["values"][:P], h["prefill_queries"] if h["num_prefill"] else None)
    for t in range(S if steps is None else steps):
        m.append(h["keys"][P + t], h["values"][P + t])
        q = h["queries"][:, t, :]
        r = m.attend(q, t)
        n = P + t + 1
        ref_out, ref_lse = rb.full_attention(q, h["keys"][:n], h["values"][:n])
        yield t, h, r, ref_out, ref_lse
