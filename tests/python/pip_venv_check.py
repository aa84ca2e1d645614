"""Runs inside the venv that test_pip_install.py made (another Python than the build's, the module from
`pip install .`), from a directory outside the source tree: the installed module replays a C++ method
(quest), a C++ method and its Python twin (streaming, examples/methods/streaming.py copied beside the
trace) on every head and step of a tiny trace, checks the twins agree, and saves what it saw for the
driver to compare with the build's own module.

    python pip_venv_check.py TRACE METHOD_FILE OUT.npz
"""

import os
import sys

import numpy as np
import retro_bench as rb
import retro_bench.closedloop.metrics
import retro_bench.dump.prompts
import retro_bench.plotting.results

trace_path, method_file, out_path = sys.argv[1:4]

# the package (core, Python modules) and NumPy are the venv's: nothing from the source tree or the build
for mod in (rb, rb.core(), retro_bench.closedloop.metrics, retro_bench.dump.prompts, retro_bench.plotting.results, np):
    assert os.path.realpath(mod.__file__).startswith(os.path.realpath(sys.prefix) + os.sep), \
        f"{mod.__name__} loaded from {mod.__file__}, not from the venv {sys.prefix}"
assert issubclass(rb.Method, object) and rb.Param(1, description="d", source="s").type == "int"

METHODS = {"quest": ("quest", {"k": 128}),
           "streaming": ("streaming", {"sink": 16, "window": 100}),
           "py_streaming": ("py:" + method_file + ":StreamingLLM", {"sink": 16, "window": 100})}

t = rb.Trace(trace_path)
saved = {"methods": np.array([m["name"] for m in rb.methods()])}
for kv in range(t.info["num_kv_heads"]):
    h = t.read_head(0, kv)
    P, d, g = h["prompt_len"], h["head_dim"], h["group"]
    for key, (name, params) in METHODS.items():
        m = rb.HeadMethod(name, params, d, g, layer=0, kv_head=kv, storage=t.info["dtype"])
        m.build(h["keys"][:P], h["values"][:P], h["prefill_queries"])
        for s in range(h["num_steps"]):
            m.append(h["keys"][P + s], h["values"][P + s])
            r = m.attend(h["queries"][:, s, :], s)
            for q in range(g):
                saved[f"{key}/ids/{kv}/{s}/{q}"] = r["exact_ids"][q]
            saved[f"{key}/out/{kv}/{s}"] = r["out"]
            saved[f"{key}/lse/{kv}/{s}"] = r["lse"]
            saved[f"{key}/h2d/{kv}/{s}"] = np.array(r["h2d_bytes"])

# the Python method through the installed module selects what its compiled twin selects
for k in saved:
    if k.startswith("streaming/"):
        np.testing.assert_array_equal(saved[k], saved["py_" + k], err_msg=k)
np.savez(out_path, **saved)
print("ok", rb.__file__, "python", sys.version.split()[0], "numpy", np.__version__)
