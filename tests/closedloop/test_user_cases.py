"""Bring your own cases (issue 27 #7): a closed-loop config's "cases": "FILE.jsonl" (retro_bench/closedloop/
user_cases.py, docs/closed-loop.md).

- an accepted file on the tiny random Llama (no tokenizer: token-id prompts): a fidelity line (prompt ids
  + continuation ids) and two task lines ("contains" and "exact" scoring, their own max_new_tokens) after
  a blank line; the cases keep their line numbers, the reference generates max_new_tokens per task, the
  exhaustive oracle equals it (same tokens, KL < 1e-6) and sinks-only diverges on the fidelity line;
- refusals, each by FILE:LINE with exit 2 before any model work (no results directory, the model never
  loaded): malformed JSON, an empty answer, no answers, a prompt beyond the model's context (4096), a
  text prompt for a model without a tokenizer, an unknown key, no prompt, two prompt kinds, an unknown
  scoring, max_new_tokens 0, a token id outside the vocabulary, a missing file;
- the scoring on hand-made generations (contains, exact cut at the end-of-turn token).

The config runs through retro_bench.closedloop.closed_loop with the runs retro-bench would pass
(--runs-json); `retro-bench validate` accepts it (its key check lists "cases"). Needs the dump venv and
the binding (else exit 77). ~25 s.
- "only_where_reference_answers": the methods skip a case the reference gets wrong; complete without it."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from closedloop_env import BIN, PKG, VENV  # noqa: E402 (exits 77 when a prerequisite is missing)

from retro_bench.closedloop import user_cases  # noqa: E402

VPY = os.path.join(VENV, "bin", "python")
SCRIPT = ["-m", "retro_bench.closedloop.closed_loop"]  # with PYTHONPATH=PKG, as retro-bench runs it
TMP = tempfile.mkdtemp(prefix="retro-user-cases-")
RUNS = [{"method": "oracle_topk", "params": {"k": 100000}, "label": "oracle all"},
        {"method": "streaming", "params": {"sink": 4, "window": 1}, "label": "sinks only"}]


def ids(n, seed):
    import random
    r = random.Random(seed)
    return [r.randrange(3, 512) for _ in range(n)]


def run_cases(name, lines):
    """Writes the cases file and a config naming it; runs the closed loop. Returns (result, results dir)."""
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "cases.jsonl"), "w") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    cfg = {"name": name, "experiment": "closed-loop", "model": "tiny-random-llama", "prefill_queries": 16,
           "threads": 1, "cases": "cases.jsonl"}
    path = os.path.join(d, "config.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    env = dict(os.environ, PYTHONPATH=PKG)
    r = subprocess.run([VPY, "-B", *SCRIPT, path, "--runs-json", json.dumps(RUNS), "--results",
                        os.path.join(d, "results"), "--retro-bin", BIN], capture_output=True, text=True, env=env)
    return r, os.path.join(d, "results", name)


class Accepted(unittest.TestCase):
    def test_retro_bench_validate_accepts_cases(self):
        d = os.path.join(TMP, "accepted")
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        cfg["methods"] = [{"name": x["method"], "params": x["params"]} for x in RUNS]
        path = os.path.join(d, "with-methods.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = subprocess.run([BIN, "validate", path], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("OK closed-loop config", r.stdout)

    @classmethod
    def setUpClass(cls):
        t0 = time.time()
        cls.r, cls.dir = run_cases("accepted", [
            {"id": "fid", "prompt_ids": ids(300, 1), "continuation_ids": ids(9, 2), "greedy_tokens": 4},
            "",
            {"id": "contains", "prompt_ids": ids(200, 3), "answers": ["never-generated"], "max_new_tokens": 5},
            {"prompt_ids": ids(120, 4), "answer": "17", "scoring": "exact", "max_new_tokens": 3},
        ])
        print(f"\n[time] tiny cases file: {time.time() - t0:.1f} s", file=sys.stderr)
        if cls.r.returncode != 0:
            raise AssertionError(f"closed loop failed ({cls.r.returncode}):\n{cls.r.stderr[-4000:]}")
        with open(os.path.join(cls.dir, "manifest.json")) as f:
            cls.cases = json.load(f)["cases"]
        with open(os.path.join(cls.dir, "runs.jsonl")) as f:
            cls.recs = {x["method"]: x for x in map(json.loads, f)}

    def part(self, run_id, i):
        with open(os.path.join(self.dir, "parts", run_id, self.cases[i]["id"] + ".json")) as f:
            return json.load(f)

    def test_cases_keep_their_lines(self):
        self.assertEqual([c["kind"] for c in self.cases], ["fidelity", "task", "task"])
        self.assertEqual([c["prompt_len"] for c in self.cases], [300, 200, 120])
        for c, n in zip(self.cases, (1, 3, 4)):
            self.assertIn(f"cases.jsonl:{n} ", c["desc"])

    def test_reference_generates_max_new_tokens(self):
        self.assertEqual(len(self.part("reference", 0)["tokens"]), 4)  # greedy_tokens of the fidelity line
        t1, t2 = self.part("reference", 1), self.part("reference", 2)
        self.assertEqual((len(t1["tokens"]), len(t2["tokens"])), (5, 3))
        self.assertEqual((t1["scoring"], t2["scoring"]), ("contains", "exact"))
        self.assertFalse(t1["correct"])  # "never-generated" cannot occur in space-separated token ids
        self.assertEqual(len(self.part("reference", 0)["nll"]), 8)  # 9 continuation ids: 8 scored positions

    def test_exhaustive_equals_full_and_sinks_diverge(self):
        o, s = self.recs["oracle_topk"], self.recs["streaming"]
        for i in range(3):
            self.assertEqual(self.part(o["run_id"], i)["tokens"], self.part("reference", i)["tokens"])
        self.assertLess(max(self.part(o["run_id"], 0)["kl"]), 1e-6)
        self.assertGreater(s["fidelity"]["kl_mean"], 1e-3)
        self.assertEqual(o["task"]["cases"], 3)  # the fidelity line's greedy tokens and the two tasks


class Sharded(unittest.TestCase):
    def test_shards_split_cases_by_shared_prefix_and_the_last_aggregates(self):
        """`retro-bench run --shard I/N --threads 1` on a closed-loop config: cases whose prompts share their first
        prefill chunk stay in one shard (the second reuses the first's prefill); a shard runs every run on
        its cases only; the shard that completes the grid writes runs.jsonl."""
        d = os.path.join(TMP, "sharded")
        os.makedirs(d, exist_ok=True)
        a = ids(150, 10)
        lines = [{"id": "a", "prompt_ids": a, "answers": ["x"], "max_new_tokens": 2},
                 {"id": "b", "prompt_ids": a[:64] + ids(90, 11), "answers": ["x"], "max_new_tokens": 2},
                 {"id": "c", "prompt_ids": ids(150, 12), "answers": ["x"], "max_new_tokens": 2}]
        with open(os.path.join(d, "cases.jsonl"), "w") as f:
            f.write("\n".join(json.dumps(x) for x in lines) + "\n")
        cfg = {"name": "sharded", "experiment": "closed-loop", "model": "tiny-random-llama", "prefill_queries": 16,
               "prefill_chunk": 64, "threads": 2, "cases": "cases.jsonl",
               "methods": [{"name": x["method"], "params": x["params"]} for x in RUNS]}
        path = os.path.join(d, "config.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        out = os.path.join(d, "results", "sharded")

        def plan():
            """`--shard-plan 2` (the results directory only read): {case's line: shard} of the cases it lists
            as having parts to do, and its text."""
            r = subprocess.run([BIN, "run", path, "--results", os.path.join(d, "results"), "--shard-plan", "2"],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
            return {line.split("(", 1)[1].split(" ")[0]: int(block[0]) for block in r.stdout.split("  shard ")[1:]
                    for line in block.splitlines()[1:] if line.startswith("    ")}, r.stdout
        first, text = plan()
        self.assertFalse(os.path.exists(out))  # no lock, no directory: nothing written
        self.assertIn("3 case(s) in 2 group(s)", text)
        self.assertIn("reference to do, runs 0/2 done", text)
        self.assertEqual(sorted(first), ["cases.jsonl:1", "cases.jsonl:2", "cases.jsonl:3"], text)
        self.assertEqual(first["cases.jsonl:1"], first["cases.jsonl:2"])  # one prefix, one shard
        self.assertNotEqual(first["cases.jsonl:1"], first["cases.jsonl:3"])
        done = []
        for i in (0, 1):
            r = subprocess.run([BIN, "run", path, "--results", os.path.join(d, "results"), "--shard", f"{i}/2"]
                               + (["--resume"] if i else []) + ["--threads", "1"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
            with open(os.path.join(out, "manifest.json")) as f:
                m = json.load(f)
            self.assertEqual(m["config"]["threads"], 1)  # --threads overrides the config's 2
            ids_of = {c["desc"].split(" ")[0]: c["id"] for c in m["cases"]}
            have = {line for line, cid in ids_of.items() if os.path.exists(os.path.join(out, "parts", "reference", cid + ".json"))}
            done.append((have - set().union(*[x[0] for x in done]) if done else have, r.stderr))
            if i == 0:  # shard 0's cases done: the plan lists shard 1's alone
                left, text = plan()
                self.assertEqual(left, {k: v for k, v in first.items() if v == 1}, text)
                self.assertRegex(text, r"shard 0/2: .*to do: 0 part\(s\) on 0 case\(s\)\n")
                # shard 1's estimate at the rates shard 0's parts recorded
                self.assertRegex(text, r"shard 1/2: .*to do: [36] part\(s\) on [12] case\(s\); ~[0-9]+ min of runs "
                                       r"\+ [12] prefill\(s\) of up to ~[0-9]+ min each")
                self.assertIn("estimates: the medians of the parts on disk", text)
            self.assertEqual(os.path.exists(os.path.join(out, "runs.jsonl")), i == 1, r.stderr[-2000:])
        lines_of = {1: "cases.jsonl:1", 2: "cases.jsonl:2", 3: "cases.jsonl:3"}
        shards = [{k for k, v in lines_of.items() if v in x[0]} for x in done]
        self.assertEqual(sorted(map(sorted, shards)), [[1, 2], [3]])  # a and b (one prefix) together
        ab = done[0] if shards[0] == {1, 2} else done[1]
        self.assertIn("leading tokens reused from the previous prompt", ab[1])
        self.assertIn("other shards' cases remain", done[0][1])
        with open(os.path.join(out, "runs.jsonl")) as f:
            recs = [json.loads(x) for x in f]
        self.assertEqual(sorted(x["method"] for x in recs), ["oracle_topk", "reference", "streaming"])
        self.assertTrue(all(x["task"]["cases"] == 3 for x in recs if "task" in x), recs)


class OnlyWhereReferenceAnswers(unittest.TestCase):
    def test_methods_skip_the_cases_full_attention_gets_wrong(self):
        """"only_where_reference_answers": true (issue 27 #2: the grid on the cases full attention answers):
        no method runs on a scored case the reference gets wrong, the runs are complete without it, a
        fidelity case is never skipped, and a resumed session finds nothing to do."""
        d = os.path.join(TMP, "only-answered")
        os.makedirs(d, exist_ok=True)
        digits = [str(i) for i in range(10)]  # "contains" any digit: the space-joined token ids always answer
        lines = [{"id": "hit", "prompt_ids": ids(120, 20), "answers": digits, "max_new_tokens": 2},
                 {"id": "miss", "prompt_ids": ids(130, 21), "answers": ["never-generated"], "max_new_tokens": 2},
                 {"id": "fid", "prompt_ids": ids(110, 22), "continuation_ids": ids(5, 23)}]
        with open(os.path.join(d, "cases.jsonl"), "w") as f:
            f.write("\n".join(json.dumps(x) for x in lines) + "\n")
        cfg = {"name": "only", "experiment": "closed-loop", "model": "tiny-random-llama", "prefill_queries": 16,
               "threads": 1, "cases": "cases.jsonl", "only_where_reference_answers": True,
               "methods": [{"name": x["method"], "params": x["params"]} for x in RUNS]}
        path = os.path.join(d, "config.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        res = os.path.join(d, "results")
        r = subprocess.run([BIN, "run", path, "--results", res], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("methods skipped on this case", r.stderr)
        out = os.path.join(res, "only")
        with open(os.path.join(out, "manifest.json")) as f:
            m = json.load(f)
        self.assertEqual(m["status"], "complete")
        case = {c["desc"].split(" ")[0]: c["id"] for c in m["cases"]}
        with open(os.path.join(out, "runs.jsonl")) as f:
            recs = [json.loads(x) for x in f]
        ref = next(x for x in recs if x["method"] == "reference")
        self.assertEqual(ref["cases_skipped"], 1)
        for x in recs:
            have = {ln for ln, cid in case.items() if os.path.exists(os.path.join(out, "parts", x["run_id"], cid + ".json"))}
            if x["method"] == "reference":
                self.assertEqual(have, {"cases.jsonl:1", "cases.jsonl:2", "cases.jsonl:3"})
            else:
                self.assertEqual(have, {"cases.jsonl:1", "cases.jsonl:3"}, x["label"])
                self.assertTrue(x["complete"], x["label"])
                self.assertEqual((x["cases"], x["task"]["accuracy"]), (2, 1.0), x["label"])
        # a method part on the skipped case from before the option was set: not counted, not pending
        miss_part = os.path.join(out, "parts", recs[1]["run_id"], case["cases.jsonl:2"] + ".json")
        with open(os.path.join(out, "parts", recs[1]["run_id"], case["cases.jsonl:1"] + ".json")) as f:
            stale = json.load(f)
        with open(miss_part, "w") as f:
            json.dump(dict(stale, case=case["cases.jsonl:2"], correct=True), f)
        r = subprocess.run([BIN, "run", path, "--results", res, "--resume"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertNotIn("run(s) to do", r.stderr)  # the skipped case is done, not pending
        with open(os.path.join(out, "runs.jsonl")) as f:
            again = {x["run_id"]: x for x in map(json.loads, f)}
        self.assertEqual((again[recs[1]["run_id"]]["cases"], again[recs[1]["run_id"]]["complete"]), (2, True))
        self.assertIn("[closed-loop]", r.stderr)
        r = subprocess.run([BIN, "run", path, "--results", res, "--resume", "-q"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertNotIn("[closed-loop]", r.stderr)  # -q: no progress lines from the model process
        self.assertIn("results: ", r.stdout)  # its table and where the results are, still printed
        r = subprocess.run([BIN, "validate", path], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        cfg["only_where_reference_answers"] = "yes"
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = subprocess.run([BIN, "run", path, "--results", res, "--resume"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, r.stderr[-3000:])
        self.assertIn("only_where_reference_answers must be true or false, got 'yes'", r.stderr)


class Refused(unittest.TestCase):
    GOOD = {"prompt_ids": [5, 6, 7], "answers": ["1"], "max_new_tokens": 2}

    def refused(self, lines, line_no, msg):
        t0 = time.time()
        r, d = run_cases(f"bad{len(os.listdir(TMP))}", lines)
        self.assertEqual(r.returncode, 2, r.stderr[-2000:])
        self.assertIn(f"cases.jsonl:{line_no}: " if line_no else "cases", r.stderr)
        self.assertIn(msg, r.stderr)
        self.assertNotIn("loaded in", r.stderr)  # no model work
        self.assertFalse(os.path.exists(d), "a results directory was created")
        return time.time() - t0

    def test_malformed_json(self):
        self.refused([self.GOOD, '{"prompt_ids": [1, 2], "answers": ["x"'], 2, "not valid JSON")

    def test_empty_answer(self):
        self.refused([dict(self.GOOD, answers=["ok", "  "])], 1, "empty answer")

    def test_no_answers(self):
        self.refused([self.GOOD, self.GOOD, {"prompt_ids": [1, 2]}], 3, "needs \"answers\"")
        self.refused([dict(self.GOOD, answers=[])], 1, "non-empty list of strings")

    def test_beyond_context(self):
        self.refused([self.GOOD, dict(self.GOOD, prompt_ids=[5] * 4090, max_new_tokens=8)], 2,
                     "4090 tokens + 9 decoded = 4099, beyond the model's context (4096 tokens)")

    def test_text_without_tokenizer(self):
        self.refused([{"prompt": "hello", "answers": ["x"]}], 1, "needs a tokenizer")

    def test_bad_keys_and_values(self):
        self.refused([dict(self.GOOD, temperature=0.7)], 1, "unknown key 'temperature'")
        self.refused([{"answers": ["x"]}], 1, "exactly one of")
        self.refused([dict(self.GOOD, prompt="x")], 1, "exactly one of")
        self.refused([dict(self.GOOD, scoring="fuzzy")], 1, "unknown scoring 'fuzzy'")
        self.refused([dict(self.GOOD, max_new_tokens=0)], 1, "max_new_tokens")
        self.refused([dict(self.GOOD, prompt_ids=[5, 600])], 1, "token id 600 outside the vocabulary")
        self.refused(["[1, 2]"], 1, "expected a JSON object")
        self.refused([{"prompt_ids": [1, 2, 3], "continuation_ids": [4]}], 1, "at least 2 token ids")
        self.refused([dict(self.GOOD, id=7)], 1, "\"id\" must be a non-empty string")
        self.refused([dict(self.GOOD, id="a"), dict(self.GOOD, id="b"), dict(self.GOOD, id="a")], 3,
                     "\"id\" 'a' is already line 1's")

    def test_missing_file(self):
        d = os.path.join(TMP, "missing")
        os.makedirs(d)
        cfg = os.path.join(d, "c.json")
        with open(cfg, "w") as f:
            json.dump({"name": "m", "experiment": "closed-loop", "model": "tiny-random-llama", "cases": "nope.jsonl"}, f)
        env = dict(os.environ, PYTHONPATH=PKG)
        r = subprocess.run([VPY, "-B", *SCRIPT, cfg, "--runs-json", "[]", "--results", os.path.join(d, "results")],
                           capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, 2)
        self.assertIn("cases file not found: " + os.path.join(d, "nope.jsonl"), r.stderr)


class Example(unittest.TestCase):
    def test_the_example_config_and_its_cases_file_parse(self):
        """configs/closedloop/smollm2-own-cases.json names cases/smollm2-example.jsonl, whose lines parse: one
        of each kind a file takes (the chat tasks, the raw-text task, the fidelity line)."""
        root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
        cfg_path = os.path.join(root, "configs", "closedloop", "smollm2-own-cases.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        path = user_cases.cases_path(cfg, cfg_path)
        parsed = user_cases.parse(path)
        self.assertEqual([c["id"] for _, c in parsed], ["capital", "sum", "count", "emma-opening"])
        self.assertEqual([next(k for k in user_cases.PROMPT_KINDS if k in c) for _, c in parsed],
                         ["messages", "messages", "prompt", "text"])
        self.assertEqual([c.get("scoring", "contains") for _, c in parsed[:3]], ["contains", "exact", "contains"])
        r = subprocess.run([BIN, "validate", cfg_path], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)


class Scoring(unittest.TestCase):
    def test_contains_and_exact(self):
        dec = lambda t: "".join({1: " The", 2: " answer", 3: " 42", 4: ".", 9: "<eot>", 5: " more"}[x] for x in t)  # noqa: E731
        contains = {"answers": ["42", "forty-two"], "scoring": "contains"}
        self.assertTrue(user_cases.score(contains, [1, 2, 3, 4], dec))
        self.assertFalse(user_cases.score(contains, [1, 2, 4], dec))
        turn = dict(contains, stop_ids=[9])
        self.assertTrue(user_cases.score(turn, [1, 3, 9, 5], dec))
        self.assertFalse(user_cases.score(turn, [1, 2, 9, 3], dec))  # " 42" after the end of the turn: not the answer
        exact = {"answers": ["42"], "scoring": "exact", "stop_ids": [9]}
        self.assertTrue(user_cases.score(exact, [3, 9, 5, 5], dec))      # cut at the end of turn, stripped
        self.assertFalse(user_cases.score(exact, [3, 5, 9], dec))        # " 42 more"
        self.assertFalse(user_cases.score(exact, [1, 3, 9], dec))
        self.assertTrue(user_cases.score({"answer": "42"}, [2, 3], dec))  # the builtin NIAH cases: contains


if __name__ == "__main__":
    try:
        unittest.main(verbosity=2)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
