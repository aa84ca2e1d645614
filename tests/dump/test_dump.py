"""The trace dumper (scripts/dump/dump_trace.py), end to end.

Each dump runs the dumper's own check (attention recomputed from the written file's q, K, V equals the
model's attention output captured before o_proj; stored q/k equal RoPE of the captured pre-RoPE
projections in the recorded layout and theta) and fails without a trace if it does not hold; these
tests then read the trace back with h5py and through the C++ reader (retro-bench validate / inspect).

Needs the dumper's venv (scripts/setup.sh makes it); without it the test exits 77 (ctest: skipped).
Environment: RETRO_BIN (retro-bench), RETRO_DUMP_VENV (default ~/.cache/retro-bench/dump-venv).
"""

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DUMP = os.path.join(ROOT, "scripts", "dump", "dump_trace.py")
VENV = os.environ.get("RETRO_DUMP_VENV") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
    "retro-bench", "dump-venv")
VPY = os.path.join(VENV, "bin", "python")
BIN = os.environ.get("RETRO_BIN", os.path.join(ROOT, "build", "retro-bench"))

if not (os.path.exists(VPY) and os.path.exists(os.path.join(VENV, ".retro-stamp"))):
    print(f"SKIPPED: the trace dumper's venv is missing ({VENV}); run scripts/setup.sh", flush=True)
    sys.exit(77)

import h5py  # noqa: E402  (Debian's python3-h5py, in the runner's Python)
import numpy as np  # noqa: E402

TMP = tempfile.mkdtemp(prefix="retro-dump-test-")
atexit.register(shutil.rmtree, TMP, ignore_errors=True)


def dump(out, *args, expect_ok=True):
    r = subprocess.run([VPY, "-B", DUMP, out, *args], capture_output=True, text=True)
    if expect_ok and r.returncode != 0:
        raise AssertionError(f"dump failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return r


def attrs(path):
    with h5py.File(path, "r") as f:
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}


def cpp_read(testcase, path):
    r = subprocess.run([BIN, "validate", path], capture_output=True, text=True)
    testcase.assertEqual(r.returncode, 0, r.stdout + r.stderr)
    testcase.assertIn("OK trace", r.stdout)
    js = path + ".inspect.json"
    r = subprocess.run([BIN, "inspect", path, "--json", js, "--threads", "1"], capture_output=True, text=True)
    testcase.assertEqual(r.returncode, 0, r.stdout + r.stderr)
    with open(js) as f:
        return json.load(f)


class TinyRandomLlama(unittest.TestCase):
    """Hook logic on a randomly initialized Llama (GQA 4 q / 2 kv heads), both RoPE layouts."""

    def test_half_split_float32(self):
        out = os.path.join(TMP, "tiny-half.h5")
        dump(out, "--tiny-random-llama", "--random-prompt", "300", "--steps", "6", "--dtype", "float32",
             "--prefill-chunk", "128", "--prefill-queries", "16", "--rope-layout", "half_split")
        a = attrs(out)
        self.assertEqual(a["rope_layout"], "half_split")
        chk = json.loads(a["dump_check"])
        self.assertTrue(chk["passed"])
        self.assertLess(chk["attn_max_rel_err"], 1e-4)
        self.assertLess(chk["rope_max_rel_err"], 1e-4)
        self.assertGreaterEqual(chk["attn_samples"], 20)
        with h5py.File(out) as f:
            self.assertEqual(f["layers/0/keys"].shape, (2, 306, 32))
            self.assertEqual(f["layers/1/queries"].shape, (4, 6, 32))
            self.assertEqual(f["layers/0/prefill_queries"].attrs["first_position"], 284)
        js = cpp_read(self, out)
        self.assertEqual(js["info"]["num_q_heads"], 4)
        self.assertEqual(js["info"]["num_kv_heads"], 2)
        self.assertEqual(len(js["heads"]), 8)

    def test_interleaved_float16_gqa(self):
        out = os.path.join(TMP, "tiny-inter.h5")
        dump(out, "--tiny-random-llama", "--random-prompt", "257", "--steps", "5", "--dtype", "float16",
             "--rope-layout", "interleaved", "--layers", "1", "--tiny-rope-theta", "500000")
        a = attrs(out)
        self.assertEqual(a["rope_layout"], "interleaved")
        self.assertEqual(float(a["rope_theta"]), 500000.0)
        self.assertTrue(json.loads(a["dump_check"])["passed"])
        cpp_read(self, out)

    def test_layouts_are_distinguished(self):
        # the RoPE check is discriminative: the same keys in the other layout do not pass it
        sys.path.insert(0, os.path.dirname(DUMP))
        import importlib
        dt = importlib.import_module("dump_trace")
        rng = np.random.default_rng(0)
        x = rng.standard_normal((5, 32))
        pos = np.arange(100, 105)
        perm = dt.half_to_interleaved(32)
        half = dt.apply_rope(x, pos, 1e4, "half_split")
        inter = dt.apply_rope(x[:, perm], pos, 1e4, "interleaved")
        np.testing.assert_allclose(inter, half[:, perm], atol=1e-12)   # same rotation, other channel order
        wrong = dt.apply_rope(x[:, perm], pos, 1e4, "half_split")
        self.assertGreater(np.abs(wrong - half[:, perm]).max(), 0.1)
        # dot products are layout-independent
        np.testing.assert_allclose(inter @ inter.T, half @ half.T, atol=1e-9)

    def test_failed_check_leaves_no_trace(self):
        out = os.path.join(TMP, "tiny-fail.h5")
        r = dump(out, "--tiny-random-llama", "--random-prompt", "100", "--steps", "3", "--dtype", "float16",
                 "--check-tol", "1e-12", expect_ok=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("dump check FAILED", r.stderr)
        self.assertFalse(os.path.exists(out))
        self.assertEqual([f for f in os.listdir(TMP) if ".tmp-" in f], [])

    def test_bad_input(self):
        out = os.path.join(TMP, "bad.h5")
        r = dump(out, "--tiny-random-llama", "--random-prompt", "50", "--layers", "0,7", expect_ok=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("layer 7 does not exist (the model has 2 layers", r.stderr)
        r = dump(out, "--tiny-random-llama", "--random-prompt", "4090", "--steps", "10", expect_ok=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("exceeds the model's context (4096 tokens", r.stderr)
        r = dump(out, "--model", os.path.join(TMP, "nope.gguf"), "--prompt", "x", expect_ok=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("model file not found", r.stderr)
        self.assertIn("nope.gguf", r.stderr)
        r = dump(out, "--model", "smollm2", "--recipe", os.path.join(TMP, "missing.json"), expect_ok=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("recipe file not found", r.stderr)
        self.assertFalse(os.path.exists(out))


class SmolLM2(unittest.TestCase):
    """A small real trace: SmolLM2-135M-Instruct (GGUF), ~1K-token needle prompt, 2 layers."""

    def test_smollm2_niah_1k(self):
        out = os.path.join(TMP, "smollm2-1k.h5")
        recipe = os.path.join(ROOT, "datasets", "recipes", "niah-mobydick-1k.json")
        dump(out, "--model", "smollm2", "--recipe", recipe, "--layers", "0,15", "--steps", "8",
             "--dtype", "float32", "--prefill-queries", "32")
        a = attrs(out)
        self.assertEqual(a["source"], "gguf:SmolLM2-135M-Instruct.Q4_1.gguf")
        self.assertEqual(a["rope_layout"], "interleaved")
        self.assertEqual(float(a["rope_theta"]), 100000.0)
        self.assertEqual(int(a["num_layers"]), 30)
        self.assertLessEqual(int(a["prompt_len"]), 1000)
        self.assertGreater(int(a["prompt_len"]), 950)
        chk = json.loads(a["dump_check"])
        self.assertTrue(chk["passed"])
        self.assertLess(chk["attn_max_rel_err"], 1e-4)
        self.assertLess(chk["rope_max_rel_err"], 1e-4)
        # coherent, on-topic greedy text (the model answers about the inserted needle)
        text = a["generated_text"].lower()
        self.assertTrue("secret" in text or "lighthouse" in text or "7481" in text, a["generated_text"])
        n0, n1 = json.loads(a["needle_tokens"])
        self.assertIn("lighthouse", a["needle_text"])
        self.assertTrue(300 < n0 < n1 < 700, (n0, n1))
        self.assertIn("niah:mobydick", a["prompt_source"])
        js = cpp_read(self, out)
        self.assertEqual(js["info"]["layers"], [0, 15])
        self.assertEqual(len(js["heads"]), 18)
        # retro-bench needle reads needle_tokens and replays methods on the real trace
        nj = out + ".needle.json"
        r = subprocess.run([BIN, "needle", out, "--layers", "15", "--method", "wave", "--method",
                            'oracle_topk:{"k":100000}', "--json", nj], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(nj) as f:
            nd = json.load(f)
        self.assertEqual(nd["needle_tokens"], [n0, n1])
        self.assertEqual(len(nd["heads"]), 9)
        masses = [h["needle_mass"] for h in nd["heads"]]
        self.assertEqual(masses, sorted(masses, reverse=True))
        for h in nd["heads"]:  # an oracle keeping every token attends the whole needle exactly
            self.assertAlmostEqual(h["in_exact"][1], 1.0)
            self.assertAlmostEqual(h["all_exact"][1], 1.0)
            self.assertTrue(0.0 <= h["covered"][0] <= 1.0 + 1e-9)
        r = subprocess.run([BIN, "needle", out, "--tokens", "5:3"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--tokens 5:3", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
