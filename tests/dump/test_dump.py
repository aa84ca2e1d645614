"""The trace dumper (retro_bench.dump.dump_trace; scripts/dump/dump.sh), end to end.

Each dump runs the dumper's own check (attention recomputed from the written file's q, K, V equals the
model's attention output captured before o_proj; stored q/k equal RoPE of the captured pre-RoPE
projections in the recorded layout and theta) and fails without a trace if it does not hold; these
tests then read the trace back with h5py and through the C++ reader (retro-bench validate / inspect).
The Hugging Face checkpoint path runs on real weights: the SmolLM2 GGUF dump also exports the model as a
checkpoint directory (--export-hf), which is dumped again with --model DIR and compared with the GGUF trace.

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
import time
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# the dumper as scripts/dump/dump.sh runs it: the source tree's package through its launcher
DUMP = [os.path.join(ROOT, "python", "retro_bench", "_launch.py"), "retro_bench.dump.dump_trace"]
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
# Every run starts from an empty text cache, as a new machine's first run does: the first SmolLM2 dump
# extracts its text, the later ones read the cached copy, and their prompts must be identical
# (test_hf_checkpoint_matches_gguf; issue 16 defect 1). The venv and model caches stay where they are.
os.environ["RETRO_TEXT_CACHE"] = os.path.join(TMP, "texts")


def dump(out, *args, expect_ok=True):
    """Runs the dumper in the venv; out None: no trace file argument (--export-hf alone)."""
    r = subprocess.run([VPY, "-B", *DUMP, *([out] if out is not None else []), *args], capture_output=True,
                       text=True)
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
        sys.path.insert(0, os.path.join(ROOT, "python"))
        from retro_bench.dump import dump_trace as dt
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
        # a directory that is not a Hugging Face checkpoint
        notck = os.path.join(TMP, "not-a-checkpoint")
        os.makedirs(notck, exist_ok=True)
        r = dump(out, "--model", notck, "--prompt", "x", expect_ok=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("has no config.json: not a Hugging Face checkpoint directory", r.stderr)
        # a hub id that does not exist (or no hub access): one line naming it, no traceback
        r = dump(out, "--model", "retro-bench-test/no-such-model", "--prompt", "x", expect_ok=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("could not load the Hugging Face checkpoint retro-bench-test/no-such-model", r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        r = dump(out, "--tiny-random-llama", "--random-prompt", "50", "--device", "tpu", expect_ok=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--device tpu: expected cpu, cuda or cuda:N", r.stderr)
        self.assertFalse(os.path.exists(out))

    def test_device_cuda(self):
        # where torch sees no CUDA device (this project's CPU torch): exit 2 with a clear message and no
        # file; where it does, the dump runs there and its check passes
        out = os.path.join(TMP, "tiny-cuda.h5")
        r = dump(out, "--tiny-random-llama", "--random-prompt", "64", "--steps", "2", "--dtype", "float32",
                 "--device", "cuda", expect_ok=False)
        if r.returncode == 0:
            a = attrs(out)
            self.assertIn("cuda", a["compute"])
            self.assertTrue(json.loads(a["dump_check"])["passed"])
            return
        self.assertEqual(r.returncode, 2, r.stderr[-2000:])
        self.assertIn("dump_trace: error: --device cuda: torch", r.stderr)
        self.assertIn("sees no CUDA device", r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        self.assertFalse(os.path.exists(out))
        self.assertEqual([f for f in os.listdir(TMP) if ".tmp-" in f], [])

    def test_export_hf_bad_input(self):
        # all refused before any model is loaded: nothing is written or overwritten
        full = os.path.join(TMP, "export-nonempty")
        os.makedirs(full, exist_ok=True)
        keep = os.path.join(full, "keep.txt")
        with open(keep, "w") as f:
            f.write("mine")
        r = dump(None, "--model", "smollm2", "--export-hf", full, expect_ok=False)  # export only
        self.assertEqual(r.returncode, 2)
        self.assertIn("exists and is not an empty directory", r.stderr)
        with open(keep) as f:
            self.assertEqual(f.read(), "mine")
        self.assertEqual(os.listdir(full), ["keep.txt"])
        r = dump(None, "--tiny-random-llama", "--export-hf", os.path.join(TMP, "export-tiny"),
                 expect_ok=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--tiny-random-llama has no tokenizer", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(TMP, "export-tiny")))
        r = dump(None, "--model", "smollm2", expect_ok=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no output: give the trace file OUT.h5", r.stderr)


SMOL_ARGS = ["--recipe", os.path.join(ROOT, "datasets", "recipes", "niah-mobydick-1k.json"),
             "--layers", "0,15", "--steps", "8", "--dtype", "float32", "--prefill-queries", "32"]


def interleave_perm(d):
    """HF half-split channel (j, j + d/2) pairs -> llama.cpp adjacent pairs (2j, 2j+1)."""
    perm = np.empty(d, dtype=np.int64)
    perm[0::2] = np.arange(d // 2)
    perm[1::2] = np.arange(d // 2) + d // 2
    return perm


class SmolLM2(unittest.TestCase):
    """A small real trace: SmolLM2-135M-Instruct (GGUF), ~1K-token needle prompt, 2 layers; and the same
    model through the Hugging Face checkpoint path (the GGUF exported by --export-hf during that dump,
    so one GGUF load serves both)."""

    @classmethod
    def setUpClass(cls):
        cls.gguf = os.path.join(TMP, "smollm2-1k.h5")
        cls.hf_dir = os.path.join(TMP, "hf", "SmolLM2-135M-Instruct")
        t0 = time.time()
        dump(cls.gguf, "--model", "smollm2", "--export-hf", cls.hf_dir, *SMOL_ARGS)
        print(f"\n[time] GGUF dump + --export-hf: {time.time() - t0:.1f} s", file=sys.stderr, flush=True)

    def test_smollm2_niah_1k(self):
        out = self.gguf
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


    def test_export_hf_layout(self):
        # the exported directory has a hub checkpoint's layout; lm_head is declared tied, not stored
        d = self.hf_dir
        names = sorted(os.listdir(d))
        for n in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                  "generation_config.json", "special_tokens_map.json", "retro-export.json"):
            self.assertIn(n, names)
        self.assertNotIn("tokenizer.model", names)  # would be a copy of the .gguf (the slow vocab "file")
        self.assertEqual([f for f in os.listdir(os.path.dirname(d)) if ".tmp-" in f], [])
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        self.assertEqual(cfg["architectures"], ["LlamaForCausalLM"])
        self.assertTrue(cfg["tie_word_embeddings"])
        self.assertEqual((cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
                          cfg["head_dim"], cfg["rope_theta"]), (30, 9, 3, 64, 100000.0))
        self.assertEqual(cfg["torch_dtype"], "float32")
        with open(os.path.join(d, "tokenizer_config.json")) as f:
            self.assertIn("<|im_start|>", json.load(f)["chat_template"])
        with open(os.path.join(d, "model.safetensors"), "rb") as f:  # safetensors header: u64 size + JSON
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        self.assertNotIn("lm_head.weight", header)
        self.assertEqual(header["model.embed_tokens.weight"]["shape"], [49152, 576])
        self.assertEqual(header["model.layers.15.self_attn.q_proj.weight"]["dtype"], "F32")
        with open(os.path.join(d, "retro-export.json")) as f:
            self.assertEqual(json.load(f)["source"], "gguf:SmolLM2-135M-Instruct.Q4_1.gguf")

    def test_hf_checkpoint_matches_gguf(self):
        """--model HF_DIR (transformers' safetensors path, half-split RoPE) on real weights gives the same
        trace as the GGUF it was exported from, up to the channel order of q/k."""
        hf = os.path.join(TMP, "smollm2-1k-hf.h5")
        t0 = time.time()
        dump(hf, "--model", self.hf_dir, *SMOL_ARGS)
        print(f"\n[time] HF-checkpoint dump: {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
        a, ag = attrs(hf), attrs(self.gguf)
        # the HF dump's own check: attention from the stored q, K, V = the model's output; stored q/k =
        # half-split RoPE of the captured projections
        chk = json.loads(a["dump_check"])
        self.assertTrue(chk["passed"])
        self.assertLess(chk["attn_max_rel_err"], 1e-4)
        self.assertIsNotNone(chk["rope_max_rel_err"])
        self.assertLess(chk["rope_max_rel_err"], 1e-4)
        self.assertGreaterEqual(chk["attn_samples"], 20)
        self.assertEqual(a["source"], "hf:" + self.hf_dir)
        self.assertEqual(a["rope_layout"], "half_split")
        self.assertEqual(ag["rope_layout"], "interleaved")
        self.assertIn("rotate_half", a["rope_layout_note"])
        # the same prompt (the exported tokenizer and chat template), the same greedy tokens and text
        for k in ("prompt_len", "prompt_sha256", "needle_tokens", "num_layers", "num_q_heads", "num_kv_heads",
                  "head_dim", "rope_theta", "generated_token_ids", "generated_text", "layers_dumped"):
            self.assertEqual(a[k], ag[k], k)
        self.assertEqual(len(json.loads(a["generated_token_ids"])), 9)
        d = int(a["head_dim"])
        group = int(a["num_q_heads"]) // int(a["num_kv_heads"])
        pl, steps = int(a["prompt_len"]), int(a["num_decode_steps"])
        perm = interleave_perm(d)
        stats = dict(vec=0.0, logit=0.0, weight=0.0, unpermuted=np.inf)
        with h5py.File(hf, "r") as fh, h5py.File(self.gguf, "r") as fg:
            self.assertEqual(sorted(fh["layers"].keys()), ["0", "15"])
            for l in fh["layers"].keys():
                H, G = fh[f"layers/{l}"], fg[f"layers/{l}"]
                self.assertEqual(H["prefill_queries"].attrs["first_position"],
                                 G["prefill_queries"].attrs["first_position"])
                # values: the same channel order in both
                np.testing.assert_allclose(H["values"][:], G["values"][:], rtol=1e-5, atol=1e-6)
                K, Kg = H["keys"][:].astype(np.float64), G["keys"][:].astype(np.float64)
                Q, Qg = H["queries"][:].astype(np.float64), G["queries"][:].astype(np.float64)
                # q/k vectors: interleaved pair (2j, 2j+1) = half-split channels (j, j + d/2)
                for name, x, y in (("keys", K, Kg), ("queries", Q, Qg),
                                   ("prefill_queries", H["prefill_queries"][:], G["prefill_queries"][:])):
                    np.testing.assert_allclose(x[..., perm], y, rtol=1e-5, atol=1e-5, err_msg=f"L{l} {name}")
                    scale = np.abs(y).max()
                    stats["vec"] = max(stats["vec"], float(np.abs(x[..., perm] - y).max() / scale))
                    # and the layouts really differ: without the permutation the vectors do not match
                    stats["unpermuted"] = min(stats["unpermuted"], float(np.abs(x - y).max() / scale))
                # every (head, step): q.K over the visible tokens, and the softmax weights
                for h in range(Q.shape[0]):
                    kv = h // group
                    for t in range(steps):
                        n = pl + t + 1
                        s, sg = K[kv, :n] @ Q[h, t], Kg[kv, :n] @ Qg[h, t]
                        err = np.abs(s - sg).max() / np.abs(sg).max()
                        self.assertLess(err, 1e-5, (l, h, t))
                        w, wg = np.exp(s - s.max()), np.exp(sg - sg.max())
                        w, wg = w / w.sum(), wg / wg.sum()
                        werr = np.abs(w - wg).max()
                        self.assertLess(werr, 1e-5, (l, h, t))
                        stats["logit"] = max(stats["logit"], float(err))
                        stats["weight"] = max(stats["weight"], float(werr))
        self.assertGreater(stats["unpermuted"], 0.1)
        print(f"[hf vs gguf] max rel diff of q/k vectors (permuted) {stats['vec']:.2e}, of q.k logits "
              f"{stats['logit']:.2e}, max abs diff of attention weights {stats['weight']:.2e}; without the "
              f"permutation q/k differ by >= {stats['unpermuted']:.2f} (rel)", file=sys.stderr, flush=True)
        # the C++ reader: validates the HF trace, and its per-head statistics equal the GGUF trace's
        js, jg = cpp_read(self, hf), cpp_read(self, self.gguf)
        self.assertEqual(len(js["heads"]), len(jg["heads"]))
        worst = 0.0
        for x, y in zip(js["heads"], jg["heads"]):
            self.assertEqual(sorted(x), sorted(y))
            for k, v in y.items():
                if isinstance(v, float):
                    self.assertAlmostEqual(x[k], v, delta=1e-4 * max(1.0, abs(v)), msg=k)
                    worst = max(worst, abs(x[k] - v) / max(1.0, abs(v)))
                else:
                    self.assertEqual(x[k], v, k)
        print(f"[hf vs gguf] retro-bench inspect, {len(js['heads'])} heads: max diff of a statistic "
              f"{worst:.1e} (relative above 1)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
