"""Shared by the plotting tests: paths, fixtures, the retro-bench binary."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
FIXTURES = os.path.join(HERE, "fixtures")
INSPECT = os.path.join(FIXTURES, "inspect-synth-llama3-16k.json")
# `python -m retro_bench.plotting` of the source tree's package (its launcher: no PYTHONPATH needed)
SCRIPT = [os.path.join(ROOT, "python", "retro_bench", "_launch.py"), "retro_bench.plotting"]
sys.path.insert(0, os.path.join(ROOT, "python"))

SKIP = 77  # ctest SKIP_RETURN_CODE


def fixture(name):
    return os.path.join(FIXTURES, name)


def copy_fixture(name, dest_root):
    """A writable copy of a fixture results directory (plot and report write into it)."""
    d = os.path.join(dest_root, name)
    shutil.copytree(fixture(name), d)
    return d


def runs_by_id(name):
    out = {}
    with open(os.path.join(fixture(name), "runs.jsonl"), encoding="utf-8") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                out[r["run_id"]] = r
    return out


def retro_bin():
    b = os.environ.get("RETRO_BIN")
    if b:
        return b
    for cand in ("build", "build-plot"):
        p = os.path.join(ROOT, cand, "retro-bench")
        if os.path.exists(p):
            return p
    return None


def run(cmd, env=None, timeout=300):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout)


class TempDirMixin:
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="retro-plot-test-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)
