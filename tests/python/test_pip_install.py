"""`pip install .` for another Python (docs/python.md, "Install with pip"): a fresh venv of a second
Python (the python3 first on PATH when its version differs from the build's, else another one found on
PATH or under pyenv; RETRO_PIP_PYTHON names one), the pinned build requirements of pyproject.toml from
PyPI, `pip install .` of the source tree into it, then, in that venv and outside the source tree:
  - the package imports whole (the core, retro_bench.Method, the closed loop's, plotting's and the
    dumper's modules) from the venv, and a C++ method (quest) and a Python method on retro_bench.Method
    with its compiled twin (examples/methods/streaming.py, streaming) on every head and step of a tiny
    trace (pip_venv_check.py) select and output exactly what the build's own module does (the
    interpreter running this file, PYTHONPATH at build/python);
  - the wheel's `retro-bench` command is on the venv's PATH and `retro-bench run` of a config with both
    methods gives the build's retro-bench's records (timings aside).
Also: a configure without HDF5 and FAISS fails naming libhdf5-dev and libfaiss-dev.

Cost (docs/python.md): the build requirements are installed into the venv and the build runs without
isolation, so that the pybind11 headers have a stable path (the venv is recreated at the same place) and
ccache serves every object on a second run; the build directory sits beside the test's build directory,
so the library's objects are the main build's ccache entries (same relative paths under CCACHE_BASEDIR).

Environment (cmake/python_tests.cmake): RETRO_SOURCE_DIR, RETRO_PIP_DIR_PREFIX (the build directory's
path + "-pip"), RETRO_BIN (for the trace). Needs PyPI: without it the test fails saying so."""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib

import numpy as np

from binding_util import TMP, make_trace, rb, replay

ROOT = os.environ.get("RETRO_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PREFIX = os.environ.get("RETRO_PIP_DIR_PREFIX") or os.path.join(TMP, "pip")
T0 = time.monotonic()
NET_ERRORS = ("Failed to establish a new connection", "Temporary failure in name resolution",
              "Network is unreachable", "Max retries exceeded", "ConnectionError", "ReadTimeoutError",
              "No matching distribution found", "Could not find a version that satisfies")


def log(msg):
    print(f"[pip_install {time.monotonic() - T0:6.1f} s] {msg}", flush=True)


def fail(msg):
    print(f"FAILED: {msg}", flush=True)
    sys.exit(1)


def run(cmd, what, env=None, cwd=None, expect_fail=False):
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    out = p.stdout + p.stderr
    if expect_fail:
        return p.returncode, out
    if p.returncode != 0:
        print(out[-8000:])
        if any(e in out for e in NET_ERRORS):
            fail(f"{what}: pip could not reach PyPI (this test installs pyproject.toml's pinned build "
                 f"requirements and NumPy from it); check the network or a pip index setting")
        fail(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}")
    log(f"{what}: {time.monotonic() - t:.1f} s")
    return p.returncode, out


def version_of(python):
    try:
        p = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2], sys.executable)"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0 or not p.stdout.strip():
        return None
    v, exe = p.stdout.split(maxsplit=1)
    return tuple(int(x) for x in v.split(".")), exe.strip()


def pick_python():
    """(python, why): RETRO_PIP_PYTHON, else the python3 first on PATH if its minor version differs from
    the build's, else another Python >= 3.9 (3.12, the GPU machines', first) on PATH or under pyenv."""
    mine = sys.version_info[:2]
    if os.environ.get("RETRO_PIP_PYTHON"):
        found = version_of(os.environ["RETRO_PIP_PYTHON"])
        if not found:
            fail(f"RETRO_PIP_PYTHON={os.environ['RETRO_PIP_PYTHON']} does not run")
        return found, "RETRO_PIP_PYTHON"
    first = shutil.which("python3")
    found = version_of(first) if first else None
    if found and found[0] != mine:
        return found, f"the python3 first on PATH ({first})"
    why = (f"the python3 first on PATH ({first} -> {found[1]}) is {found[0][0]}.{found[0][1]} like the build's"
           if found else "no python3 on PATH")
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    cands = []
    for minor in (12, 13, 10, 9, 14):
        cands += [shutil.which(f"python3.{minor}")] + sorted(glob.glob(f"{pyenv_root}/versions/3.{minor}.*/bin/python3"))
    for c in cands:
        f = version_of(c) if c else None
        if f and f[0] != mine and f[0] >= (3, 9):
            return f, f"{why}: using {f[1]} instead"
    fail(f"{why}, and no other Python >= 3.9 was found (python3.N on PATH, {pyenv_root}/versions): "
         f"set RETRO_PIP_PYTHON")


(ver, python), why = pick_python()
tag = f"py{ver[0]}{ver[1]}"
log(f"Python {ver[0]}.{ver[1]} at {python} ({why}); the build's module is {sys.version_info[0]}.{sys.version_info[1]}")
venv = f"{PREFIX}-{tag}/venv"                 # stable paths: ccache keys on the pybind11 headers' path
build_dir = f"{PREFIX}-{tag}"                 # beside the test's build dir: the main build's relative paths
vpy = os.path.join(venv, "bin", "python")
with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    requires = tomllib.load(f)["build-system"]["requires"]
for r in requires:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.]*", r):
        fail(f"pyproject.toml's build requirement {r!r} is not pinned (NAME==VERSION)")

env = os.environ.copy()
for k in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV"):
    env.pop(k, None)
env.setdefault("CCACHE_BASEDIR", ROOT)
pip = [vpy, "-m", "pip", "--no-input", "--disable-pip-version-check", "--timeout", "60", "--retries", "2"]

# 1. a fresh venv of that Python (re-made at the same path each time)
os.makedirs(build_dir, exist_ok=True)
run([python, "-m", "venv", "--clear", venv], f"venv ({python})", env=env)

# 2. the pinned build requirements from PyPI (pip's cache keeps the wheels), then `pip install .`
run(pip + ["install", "--progress-bar", "off", *requires], "build requirements " + " ".join(requires), env=env)
rc, out = run(pip + ["install", "-v", "--no-build-isolation", "--progress-bar", "off",
                     f"--config-settings=build-dir={build_dir}", ROOT], "pip install .", env=env)
steps = re.findall(r"\[\d+/(\d+)\]", out)
log(f"  ninja steps: {steps[-1] if steps else '?'}; installed: "
    + ", ".join(re.findall(r"Successfully installed (.*)", out)))
if "CUDA kernels OFF" not in out or "retro-bench: Python module ON" not in out:
    fail("the pip build is not the Python-only configuration (RETRO_PYTHON_ONLY)")
for unwanted in ("retro_unit_tests", "retro_gpu_run", "benchmarks/"):
    if unwanted in out:
        fail(f"the pip build built {unwanted}: it should build the library, the module and retro-bench only")

# 3. the installed module, outside the source tree, on a tiny trace; its results equal the build's module's
work = os.path.join(TMP, "outside")
os.makedirs(work)
trace = make_trace()
method_file = shutil.copy(os.path.join(ROOT, "examples", "methods", "streaming.py"), work)
npz = os.path.join(work, "venv.npz")
rc, out = run([vpy, "-I", os.path.join(os.path.dirname(os.path.abspath(__file__)), "pip_venv_check.py"),
               trace, method_file, npz], "methods in the venv", env=env, cwd=work)
log("  " + out.strip().splitlines()[-1])
so = glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "retro_bench", "_core.*.so"))
if len(so) != 1:
    fail(f"expected one compiled core retro_bench/_core.*.so in the venv, found {so}")
dyn = subprocess.run(["readelf", "-d", so[0]], capture_output=True, text=True).stdout
if "RPATH" in dyn or "RUNPATH" in dyn:
    fail(f"{so[0]} keeps a run path (it must need nothing from the build tree):\n{dyn}")

got = np.load(npz)
assert list(got["methods"]) == [m["name"] for m in rb.methods()], "the registries differ"
t = rb.Trace(trace)
n_cmp = 0
for kv in range(t.info["num_kv_heads"]):
    for key, params in (("quest", {"k": 128}), ("streaming", {"sink": 16, "window": 100})):
        for s, h, r, _, _ in replay(t, 0, kv, key, params):
            P, g = h["prompt_len"], h["group"]
            where = f"{key} head {kv} step {s}"
            for q in range(g):
                np.testing.assert_array_equal(got[f"{key}/ids/{kv}/{s}/{q}"], r["exact_ids"][q], err_msg=where)
            np.testing.assert_allclose(got[f"{key}/out/{kv}/{s}"], r["out"], rtol=0, atol=1e-6, err_msg=where)
            np.testing.assert_allclose(got[f"{key}/lse/{kv}/{s}"], r["lse"], rtol=1e-12, err_msg=where)
            assert float(got[f"{key}/h2d/{kv}/{s}"]) == r["h2d_bytes"], where
            n_cmp += 1
    # not vacuous: quest keeps a strict subset of the context, differing between query heads
    ids = [got[f"quest/ids/{kv}/0/{q}"] for q in range(g)]
    assert len(ids[0]) < P and any(not np.array_equal(ids[0], x) for x in ids), f"quest head {kv} selects everything"
log(f"the venv's quest and streaming (C++ and Python) equal the build's module on {n_cmp} head-steps")

# 3b. the wheel's retro-bench command, on the venv's PATH, runs a config as the build's retro-bench does
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
import same_results  # noqa: E402  (records equal, timings aside)

venv_bin = os.path.join(venv, "bin")
cli = shutil.which("retro-bench", path=venv_bin)
if not cli or os.path.dirname(cli) != venv_bin:
    fail(f"`pip install .` put no retro-bench command in {venv_bin}")
rc, out = run([cli, "--version"], "retro-bench --version (the wheel's)", env=env, cwd=work)
cfg = os.path.join(work, "cli.json")
with open(cfg, "w") as f:
    json.dump({"name": "cli", "traces": [trace], "threads": 1, "steps": "all",
               "methods": [{"name": "quest", "params": {"k": 128}},
                           {"name": "py:" + method_file + ":StreamingLLM", "params": {"sink": 16, "window": 100}}]}, f)
venv_env = dict(env, PATH=venv_bin + os.pathsep + env.get("PATH", ""))
run(["retro-bench", "run", cfg, "--results", os.path.join(work, "wheel")], "retro-bench run (the wheel's)",
    env=venv_env, cwd=work)
run([os.environ.get("RETRO_BIN") or os.path.join(ROOT, "build", "retro-bench"), "run", cfg, "--results",
     os.path.join(work, "build")], "retro-bench run (the build's)", env=env, cwd=work)
def records(d):  # timings aside (same_results), and the revision each binary was built at
    return [json.dumps({k: v for k, v in json.loads(r).items() if k != "revision"}, sort_keys=True)
            for r in same_results.runs(d)]


a, b = records(os.path.join(work, "wheel", "cli")), records(os.path.join(work, "build", "cli"))
if len(a) != 2 or a != b:
    fail(f"the wheel's retro-bench run differs from the build's:\n{a}\n{b}")
log("the wheel's retro-bench command: its records equal the build's retro-bench's (quest, a Python Method)")

# 4. without the Debian libraries the configure step stops and names them (pip shows CMake's message)
rc, out = run(pip + ["install", "--no-build-isolation", f"--config-settings=build-dir={TMP}/nolibs",
                     "--config-settings=cmake.define.CMAKE_DISABLE_FIND_PACKAGE_HDF5=ON",
                     "--config-settings=cmake.define.CMAKE_DISABLE_FIND_PACKAGE_faiss=ON", ROOT],
              "configure without HDF5 and FAISS", env=env, expect_fail=True)
if rc == 0 or "missing C++ libraries" not in out or "libhdf5-dev" not in out or "libfaiss-dev" not in out:
    print(out[-4000:])
    fail("a configure without HDF5 and FAISS did not fail naming libhdf5-dev and libfaiss-dev")
log("configure without HDF5 and FAISS: fails naming libhdf5-dev and libfaiss-dev")
log("passed")
