"""Python methods (python/methods/, docs/adding-a-method.md): the two re-implementations in
examples/methods/ select what their compiled twins select, their results files differ from the twins'
only by name and source hash, an edited file is a new method for --resume, shards merge to the unsharded
results, parameters are checked before work, and every broken method fails its run by name with nothing
half-written."""

import glob
import json
import os
import shutil
import subprocess
import sys
import time
import unittest

import numpy as np

import bad_methods
from binding_util import BIN, ROOT, TMP, make_trace, rb

EX = os.path.join(ROOT, "examples", "methods")
STREAMING = "py:" + os.path.join(EX, "streaming.py") + ":StreamingLLM"
QUEST = "py:" + os.path.join(EX, "quest.py") + ":QuestPages"
BAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad_methods.py")
FAULTY = "py:" + BAD + ":Faulty"
TIMED = {"select_us", "attend_us"}

# (compiled, Python, params): the pairs the tests hold equal; quest at a fraction, at a count and dense
TWINS = [("streaming", STREAMING, {}), ("streaming", STREAMING, {"sink": 16, "window": 100}),
         ("quest", QUEST, {"k": 128}), ("quest", QUEST, {"k": 0.3, "page_size": 8}), ("quest", QUEST, {"k": 4096})]


def run(cfg_name, methods, *args, trace=None, threads=2, results=None):
    """`retro-bench run` of `methods` on the tiny trace; returns (CompletedProcess, results dir)."""
    cfg = {"name": cfg_name, "traces": [trace or make_trace()], "steps": "all",
           "metrics": {"recall_k": [10, 32]}, "threads": threads, "methods": methods}
    path = os.path.join(TMP, cfg_name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    results = results or os.path.join(TMP, "results")
    p = subprocess.run([BIN, "run", path, "--results", results, *args], capture_output=True, text=True)
    return p, os.path.join(results, cfg_name)


def records(d):
    with open(os.path.join(d, "runs.jsonl")) as f:
        return [json.loads(line) for line in f]


def parts(d, run_id):
    out = {}
    for p in sorted(glob.glob(os.path.join(d, "parts", run_id, "*.json"))):
        with open(p) as f:
            out[os.path.basename(p)] = json.load(f)
    return out


class Twins(unittest.TestCase):
    def test_same_selections_step_by_step(self):
        """Through rb.HeadMethod (the closed loop's path): every head and step, the same ids per query
        head, output, traffic, scan and footprint."""
        t = rb.Trace(make_trace())
        for cpp, py, params in TWINS:
            for kv_head in range(t.info["num_kv_heads"]):
                h = t.read_head(0, kv_head)
                P, d, g = h["prompt_len"], h["head_dim"], h["group"]
                ms = [rb.HeadMethod(name, params, d, g, layer=0, kv_head=kv_head, storage=t.info["dtype"])
                      for name in (cpp, py)]
                for m in ms:
                    m.build(h["keys"][:P], h["values"][:P], h["prefill_queries"])
                for s in range(h["num_steps"]):
                    rs = []
                    for m in ms:
                        m.append(h["keys"][P + s], h["values"][P + s])
                        rs.append(m.attend(h["queries"][:, s, :], s))
                    a, b = rs
                    where = f"{py} {params} head {kv_head} step {s}"
                    for q in range(g):
                        np.testing.assert_array_equal(a["exact_ids"][q], b["exact_ids"][q], err_msg=where)
                    np.testing.assert_array_equal(a["out"], b["out"], err_msg=where)
                    for k in ("scan_ops", "h2d_bytes", "d2h_bytes", "fetch_tokens", "est_tokens"):
                        self.assertEqual(a[k], b[k], f"{where}: {k}")
                    self.assertEqual(ms[0].footprint(), ms[1].footprint(), where)
                # not vacuous: quest's budgets select a strict subset, per query head
                if cpp == "quest" and params["k"] == 128:
                    self.assertLess(len(a["exact_ids"][0]), P)
                    self.assertTrue(any(not np.array_equal(a["exact_ids"][0], a["exact_ids"][q]) for q in range(g)))

    def test_results_files_differ_only_by_name_and_source(self):
        """A run of both twins (2 worker threads: the GIL taken per call): part samples and records equal
        but for timings, the name, and the Python method's source (file, sha256)."""
        methods = []
        for cpp, py, params in TWINS[:3]:
            methods += [{"name": cpp, "params": params}, {"name": py, "params": params}]
        p, d = run("twins", methods)
        self.assertEqual(p.returncode, 0, p.stderr)
        recs = records(d)
        self.assertEqual(len(recs), 6)
        src = {"file": os.path.join(EX, "quest.py")}
        for a, b in zip(recs[0::2], recs[1::2]):
            self.assertNotIn("method_source", a)
            self.assertTrue(b["run_id"].startswith("py-"))
            self.assertEqual(len(b["method_source"]["sha256"]), 64)
            if "quest" in b["method"]:
                self.assertEqual(b["method_source"]["file"], src["file"])
            self.assertEqual(set(a) | {"method_source"}, set(b))
            for k in set(a) - {"run_id", "method", "label", "params", "index", "finished_at"}:
                if k in ("metrics", "per_layer"):
                    self.assertEqual({m: v for m, v in a[k].items() if m not in TIMED | {"build_ms"}},
                                     {m: v for m, v in b[k].items() if m not in TIMED | {"build_ms"}}, k)
                else:
                    self.assertEqual(a[k], b[k], k)
            pa, pb = parts(d, a["run_id"]), parts(d, b["run_id"])
            self.assertEqual(sorted(pa), ["L0_H0.json", "L0_H1.json", "L0_H2.json"])
            self.assertEqual(sorted(pa), sorted(pb))
            for f in pa:
                self.assertEqual(pb[f]["method_source"], b["method_source"])
                self.assertEqual(pa[f]["q_metrics"], pb[f]["q_metrics"], f)
                for k in set(pa[f]["kv_metrics"]) - TIMED:
                    self.assertEqual(pa[f]["kv_metrics"][k], pb[f]["kv_metrics"][k], f"{f} {k}")


class ResumeAndShards(unittest.TestCase):
    def test_changed_file_is_a_changed_method(self):
        mine = os.path.join(TMP, "mine", "streaming_copy.py")
        os.makedirs(os.path.dirname(mine), exist_ok=True)
        shutil.copy(os.path.join(EX, "streaming.py"), mine)
        methods = [{"name": "py:" + mine + ":StreamingLLM"}]
        p, d = run("edited", methods)
        self.assertEqual(p.returncode, 0, p.stderr)
        (first,) = records(d)
        p, _ = run("edited", methods, "--resume")  # same file: nothing to run
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(records(d), [first])
        with open(mine, "a") as f:
            f.write("\n# edited\n")
        p, _ = run("edited", methods, "--resume")
        self.assertEqual(p.returncode, 0, p.stderr)
        (second,) = records(d)
        self.assertNotEqual(first["run_id"], second["run_id"])
        self.assertNotEqual(first["method_source"]["sha256"], second["method_source"]["sha256"])
        self.assertEqual(len(parts(d, second["run_id"])), 3)  # computed anew, not taken from the old parts
        for part in parts(d, second["run_id"]).values():
            self.assertEqual(part["method_source"], second["method_source"])

    def test_shards_give_the_unsharded_results(self):
        methods = [{"name": QUEST, "params": {"k": 128}}, {"name": STREAMING}]
        whole = os.path.join(TMP, "whole")
        p, a = run("sharded", methods, results=whole)
        self.assertEqual(p.returncode, 0, p.stderr)
        split = os.path.join(TMP, "split")
        for i in (0, 1):
            p, b = run("sharded", methods, "--shard", f"{i}/2", results=split)
            self.assertEqual(p.returncode, 0, p.stderr)
        same = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "cluster", "same_results.py"), a, b],
                              capture_output=True, text=True)
        self.assertEqual(same.returncode, 0, same.stdout + same.stderr)


class DocumentedExample(unittest.TestCase):
    def test_adding_a_method_example_runs(self):
        """The class at the top of docs/adding-a-method.md, as written there, runs and reports its traffic."""
        with open(os.path.join(ROOT, "docs", "adding-a-method.md")) as f:
            doc = f.read()
        code = doc.split("```python\n# my_methods.py\n", 1)[1].split("```", 1)[0]
        path = os.path.join(TMP, "doc_example", "my_methods.py")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(code)
        p, d = run("doc-example", [{"name": "py:" + path + ":TopKByNorm", "params": {"k": 32}}])
        self.assertEqual(p.returncode, 0, p.stderr)
        (r,) = records(d)
        # 32 tokens by norm + a 64-token window each step; the 32 cross PCIe as float16 K+V (d = 64)
        self.assertAlmostEqual(r["metrics"]["fetch_bytes"]["mean"], 32 * 2 * 64 * 2)
        n = 600 + np.arange(1, 7)
        self.assertAlmostEqual(r["metrics"]["exact_frac"]["mean"], np.mean(96 / n), places=9)


class Declarations(unittest.TestCase):
    def cli(self, *args):
        return subprocess.run([BIN, *args], capture_output=True, text=True)

    def test_list_methods_shows_declared_parameters(self):
        p = self.cli("list-methods", "--py", os.path.join(EX, "quest.py"), "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        (m,) = json.loads(p.stdout)
        self.assertEqual(m["name"], QUEST)
        self.assertEqual([(s["name"], s["type"], s["default"]) for s in m["params"]],
                         [("k", "number", 2048), ("page_size", "int", 16)])
        self.assertEqual(m["source"]["file"], os.path.join(EX, "quest.py"))
        p = self.cli("list-methods", "--py", BAD)
        self.assertNotEqual(p.returncode, 0)  # BadDeclaration's type is refused while listing
        self.assertIn("BadDeclaration", p.stderr)

    def validate(self, name, params):
        path = os.path.join(TMP, "validate.json")
        with open(path, "w") as f:
            json.dump({"name": "v", "traces": [make_trace()], "methods": [{"name": name, "params": params}]}, f)
        return self.cli("validate", path)

    def test_validate_checks_before_work(self):
        p = self.validate(QUEST, {"k": 128, "page_size": [8, 16]})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("QuestPages(k=128,page_size=8)", p.stdout)
        cases = [
            (QUEST, {"page_size": 0}, "parameter 'page_size' = 0: expected a value in [1"),
            (QUEST, {"budget": 3}, "unknown parameter 'budget' (parameters: k, page_size)"),
            (FAULTY, {"fault": "all"}, "parameter 'fault' = \"all\": expected one of none|raise"),
            ("py:" + BAD + ":BadDeclaration", {}, "type 'integer' is not one of int|number|bool|string"),
            ("py:" + BAD + ":NotAMethod", {}, "NotAMethod is not a method class"),
            ("py:" + BAD + ":Missing", {}, "defines no class 'Missing' (method classes there: Faulty, BadDeclaration, Hangs)"),
            ("py:" + BAD + "x:Faulty", {}, "no such file " + BAD + "x"),
        ]
        for name, params, expected in cases:
            p = self.validate(name, params)
            self.assertEqual(p.returncode, 2, f"{name} {params}: {p.stdout}")
            self.assertIn(expected, p.stderr)
            self.assertIn(name, p.stderr)


class BrokenMethods(unittest.TestCase):
    # fault -> what the message says beside the name (every fault bad_methods.py knows)
    FAULTS = {
        "raise": "select raised ValueError: boom",
        "out_of_range": "token id 603 at index 20 is out of range: visible tokens are [0, 603)",  # step 2: 600 + 3
        "duplicate": "token id 0 appears twice",
        "wrong_lists": "exact: 2 lists; expected 1 (shared) or group = 3",
        "float_ids": "expected integer token ids, got dtype float32",
        "nan_log_weight": "log_weights[0]: NaN or Inf at index 0",
        "nan_centroid": "estimated['centroids']: NaN or Inf",
        "centroid_shape": "estimated['centroids']: expected shape (c, 64), got (1, 65)",
        "short_log_weights": "log_weights[0]: expected shape (20,), got (19,)",
        "bad_key": "unknown key 'h2d_byte'",
        "keep_kv": "kept a reference to kv",
        "negative_bytes": "h2d_bytes: expected a finite number >= 0",
        "none_returned": "returned None",
        "build_raises": "build raised RuntimeError: cannot index this head",
        "append_raises": "append raised KeyError: 'no such token'",
        "bad_footprint": "footprint unknown key 'gpu' (keys: gpu_bytes, cpu_bytes)",
    }

    def test_each_fault_fails_the_run_by_name(self):
        self.assertEqual(set(self.FAULTS), set(bad_methods.FAULTS) - {"none"})
        for fault, expected in self.FAULTS.items():
            with self.subTest(fault=fault):
                p, d = run("bad-" + fault, [{"name": "streaming"}, {"name": FAULTY, "params": {"fault": fault}}])
                self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                where = "(layer 0, KV head 1" + (")" if fault == "build_raises" else ", step 2)")
                self.assertIn(f"Python method {FAULTY} {where}", p.stderr)
                self.assertIn(expected, p.stderr)
                # nothing half-written: no summary, the session failed, the failing head has no part
                # (heads other workers finished are whole parts, which --resume keeps), no temp file
                self.assertFalse(os.path.exists(os.path.join(d, "runs.jsonl")))
                with open(os.path.join(d, "manifest.json")) as f:
                    self.assertEqual(json.load(f)["status"], "failed")
                self.assertEqual(glob.glob(os.path.join(d, "parts", "py-Faulty-*", "L0_H1.json")), [])
                self.assertEqual([f for f in glob.glob(os.path.join(d, "**"), recursive=True) if ".tmp" in f], [])

    def test_fault_through_head_method(self):
        """The module's path (the closed loop): the same message as an rb.Error."""
        t = rb.Trace(make_trace())
        h = t.read_head(0, 1)
        P = h["prompt_len"]
        m = rb.HeadMethod(FAULTY, {"fault": "duplicate", "step": 0}, h["head_dim"], h["group"], layer=0, kv_head=1)
        m.build(h["keys"][:P], h["values"][:P])
        m.append(h["keys"][P], h["values"][P])
        with self.assertRaises(rb.Error) as e:
            m.attend(h["queries"][:, 0, :], 0)
        self.assertIn(f"Python method {FAULTY} (layer 0, KV head 1, step 0): select returned an invalid "
                      "selection: exact: token id 0 appears twice", str(e.exception))


class Interrupt(unittest.TestCase):
    """Ctrl-C while a Python method is mid-call (issue 43 #4): the run stops within about a second (not
    after the call), exits 130, leaves nothing half-written, and --resume completes it to the results of an
    uninterrupted run."""

    def test_sigint_mid_call_stops_and_resumes(self):
        import signal
        hangs = "py:" + BAD + ":Hangs"
        methods = [{"name": "streaming"}, {"name": hangs}]
        clean, d_clean = run("hang-clean", methods, threads=1)
        self.assertEqual(clean.returncode, 0, clean.stderr)
        cfg = os.path.join(TMP, "hang-clean.json")  # the same config, another results root
        results = os.path.join(TMP, "results-hang")
        marker = os.path.join(TMP, "hang-started")
        env = dict(os.environ, RETRO_TEST_HANG=marker)
        p = subprocess.Popen([BIN, "run", cfg, "--results", results], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while not os.path.exists(marker) and time.time() < deadline and p.poll() is None:
            time.sleep(0.01)
        self.assertTrue(os.path.exists(marker), "the method never started its long call")
        t0 = time.time()
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        stop_s = time.time() - t0
        print(f"\n[time] SIGINT to exit with a Python method mid-call: {stop_s:.2f} s", file=sys.stderr)
        self.assertEqual(p.returncode, 130, err)
        self.assertLess(stop_s, 5.0, "the stop waited for the method's call to end (it spins for 60 s)")
        self.assertIn("interrupted", err)
        d = os.path.join(results, "hang-clean")
        # the interrupted head has no part of the hanging run, so that run has no (complete) record
        self.assertEqual([x for x in records(d) if x["method"] == hangs], [])
        with open(os.path.join(d, "manifest.json")) as f:
            self.assertEqual(json.load(f)["status"], "interrupted")
        self.assertEqual([f for f in glob.glob(os.path.join(d, "**"), recursive=True) if ".tmp" in f], [])
        # the interrupted head has no part of the hanging run, so that run has no (complete) record
        self.assertEqual([x for x in records(d) if x["method"] == hangs], [])
        r = subprocess.run([BIN, "run", cfg, "--results", results, "--resume"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)

        def means(dd):
            return {x["run_id"]: {k: v["mean"] for k, v in x["metrics"].items() if k not in TIMED and k != "build_ms"}
                    for x in records(dd)}
        self.assertEqual(means(d), means(d_clean))


if __name__ == "__main__":
    unittest.main(verbosity=2)
