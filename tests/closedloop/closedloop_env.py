"""What every closed-loop test needs before it starts: the paths (ROOT, BIN = retro-bench, VENV = the dump
venv, PKG = the directory holding the retro_bench package with its compiled core: build/python) and the
two prerequisites, checked once here; PKG goes first on sys.path, so a test imports the package's modules
(retro_bench.closedloop.metrics) as the closed loop does. Without the dump venv or the compiled core the
importing test exits 77 (ctest: skipped) with a line saying which is missing.
Environment: RETRO_BIN (retro-bench), RETRO_DUMP_VENV, RETRO_PYTHONPATH (a package built elsewhere)."""

import glob
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("RETRO_BIN", os.path.join(ROOT, "build", "retro-bench"))
VENV = os.environ.get("RETRO_DUMP_VENV") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
    "retro-bench", "dump-venv")

if not (os.path.exists(os.path.join(VENV, "bin", "python")) and os.path.exists(os.path.join(VENV, ".retro-stamp"))):
    print(f"SKIPPED: the dump venv is missing ({VENV}); run scripts/setup.sh", flush=True)
    sys.exit(77)
PKG = os.environ.get("RETRO_PYTHONPATH") or os.path.join(os.path.dirname(BIN), "python")
if not glob.glob(os.path.join(PKG, "retro_bench", "_core*.so")):
    print(f"SKIPPED: the retro_bench package's core was not built (no {PKG}/retro_bench/_core*.so: "
          "pybind11-dev / python3-dev missing?)", flush=True)
    sys.exit(77)
sys.path.insert(0, PKG)
