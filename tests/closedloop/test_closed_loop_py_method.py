"""A Python method inside the closed loop (`retro-bench run` of a closed-loop config, the tiny random
Llama of tests/dump): the re-implementations of examples/methods/ give their compiled twins' fidelity
(KL, top-1, greedy agreement) and traffic; the run id carries the file's hash; a broken method fails the
run by name. Needs the dump venv and the binding (exit 77 otherwise, as every closed-loop test)."""

import json
import os
import subprocess
import tempfile
import unittest

from closedloop_env import BIN, ROOT  # noqa: E402 (exits 77 when a prerequisite is missing)

TMP = tempfile.mkdtemp(prefix="retro-closedloop-py-")
EX = os.path.join(ROOT, "examples", "methods")
STREAMING = "py:" + os.path.join(EX, "streaming.py") + ":StreamingLLM"
QUEST = "py:" + os.path.join(EX, "quest.py") + ":QuestPages"
FAULTY = "py:" + os.path.join(ROOT, "tests", "python", "bad_methods.py") + ":Faulty"


def run(name, methods):
    cfg = {"name": name, "experiment": "closed-loop", "model": "tiny-random-llama", "prefill_queries": 16,
           "threads": 1, "fidelity": {"random_prompt": 300, "continuation_tokens": 8, "greedy_tokens": 8},
           "methods": methods}
    path = os.path.join(TMP, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    p = subprocess.run([BIN, "run", path, "--results", os.path.join(TMP, "results")], capture_output=True, text=True)
    return p, os.path.join(TMP, "results", name)


class PythonMethodInClosedLoop(unittest.TestCase):
    def test_twins_score_the_same(self):
        pairs = [("streaming", STREAMING, {"sink": 4, "window": 8}), ("quest", QUEST, {"k": 64, "page_size": 8})]
        methods = [{"name": n, "params": p} for c, py, p in pairs for n in (c, py)]
        p, d = run("twins", methods)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr[-3000:])
        with open(os.path.join(d, "runs.jsonl")) as f:
            recs = {r["method"]: r for r in map(json.loads, f)}
        for cpp, py, _ in pairs:
            a, b = recs[cpp], recs[py]
            self.assertTrue(b["run_id"].startswith("py-"), b["run_id"])
            self.assertEqual(len(b["method_source"]["sha256"]), 64)
            self.assertNotIn("method_source", a)
            self.assertEqual(a["fidelity"], b["fidelity"], py)
            self.assertEqual(a["task"], b["task"], py)
            for k in ("exact_frac", "est_frac", "h2d_bytes_per_step"):
                self.assertEqual(a[k], b[k], f"{py} {k}")
        self.assertGreater(recs["streaming"]["fidelity"]["kl_mean"], 0.01)  # lossy: the comparison means something
        self.assertLess(recs["quest"]["exact_frac"], 1.0)

    def test_broken_method_fails_by_name(self):
        p, d = run("broken", [{"name": FAULTY, "params": {"fault": "out_of_range"}}])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(f"Python method {FAULTY} (layer 0, KV head 1, step 2): select returned an invalid selection",
                      p.stderr)
        self.assertFalse(os.path.exists(os.path.join(d, "runs.jsonl")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
