"""What every closed-loop test needs before it starts: the paths (ROOT, BIN = retro-bench, VENV = the dump
venv) and the two prerequisites, checked once here. Without the dump venv or the retro_bench binding the
importing test exits 77 (ctest: skipped) with a line saying which is missing.
Environment: RETRO_BIN (retro-bench), RETRO_DUMP_VENV, RETRO_PYTHONPATH (a binding built elsewhere)."""

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
if not (glob.glob(os.path.join(os.path.dirname(BIN), "python", "retro_bench*.so")) or os.environ.get("RETRO_PYTHONPATH")):
    print(f"SKIPPED: the retro_bench binding was not built (no {os.path.dirname(BIN)}/python/retro_bench*.so: "
          "pybind11-dev / python3-dev missing?)", flush=True)
    sys.exit(77)
