"""retro_bench.closedloop.claims (issue 27 #4, docs/closed-loop.md): NIAH accuracy minus full attention's per
context, on hand-written results directories (no model, no venv; Debian's /usr/bin/python3 with numpy).

Two directories of one model, as a grid split over two sessions: A holds 16K cases (16,000 and 16,384
tokens: one context) and a 32K fidelity case, B two 32K NIAH cases; a reference and two methods at two
budgets each, one part missing. Checked: the grouping by context and the pooling of B with A's 32K case,
full's accuracy on the run's own cases (the missing part's case left out of both sides), the difference
in points, accuracy on full's correct cases, "3/4 cases", KL / top-1 from the fidelity part, the run
order, the matched-budget choice (nearest exact_frac to 1.8 / 5 / 10 %) and its within-2-points column,
another model's directory in its own tables, the Markdown and --json, the one-line error (exit 2) on
directories that are not closed-loop results, "only_where_reference_answers" directories, and --reference
(full attention's own accuracy per context and variant). ~1 s."""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))  # the package's pure Python (no compiled core needed)
from retro_bench.closedloop import claims  # noqa: E402

# `python -m retro_bench.closedloop.claims` of the source tree's package, as a user runs it
SCRIPT = [os.path.join(ROOT, "python", "retro_bench", "_launch.py"), "retro_bench.closedloop.claims"]

RUNS = [{"id": "oracle_topk-aaaa", "method": "oracle_topk", "params": {"k": 300}, "label": "oracle 300"},
        {"id": "oracle_topk-bbbb", "method": "oracle_topk", "params": {"k": 100}, "label": "oracle 100"},
        {"id": "streaming-cccc", "method": "streaming", "params": {"sink": 4, "window": 236}, "label": "sinks 240"},
        {"id": "streaming-dddd", "method": "streaming", "params": {"sink": 4, "window": 1756}, "label": "sinks 1760"}]
# exact_frac of each run's decode loops (the same at every context here)
BUDGET = {"oracle_topk-aaaa": 0.05, "oracle_topk-bbbb": 0.02, "streaming-cccc": 0.015, "streaming-dddd": 0.11}
# per NIAH case: full attention's answer, then each run's in RUNS' order (None: the part is missing)
ANSWERS = {"niah-a1": (True, True, True, False, True),
           "niah-a2": (True, True, False, False, True),
           "niah-a3": (True, True, True, True, True),
           "niah-a4": (False, False, False, False, None),
           "niah-b1": (True, True, True, False, True),
           "niah-b2": (False, True, False, False, False)}
LENGTHS = {"niah-a1": 16000, "niah-a2": 16000, "niah-a3": 16384, "niah-a4": 16000, "niah-b1": 32000,
           "niah-b2": 32000, "fidelity-f1": 32000}
KL = {"oracle_topk-aaaa": [0.01, 0.03], "oracle_topk-bbbb": [0.1, 0.3], "streaming-cccc": [1.0, 2.0],
      "streaming-dddd": [0.2, 0.2]}


def write(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f)


def info(frac):
    return {"exact_frac": frac, "est_frac": 0.0, "build_s": 0.0, "step_ms": [1.0], "method_s": 0.0,
            "h2d_bytes_per_step": 0.0}


def niah_part(run_id, case, correct, correct_full):
    """A method's (or, with run_id None, the reference's) part of a NIAH case, as closed_loop.run_case writes it."""
    p = {"case": case, "kind": "niah", "desc": f"{case} {LENGTHS[case]}", "tokens": [1, 2], "text": "x",
         "answer": "123456", "correct": correct}
    if run_id is None:
        return dict(p, prompt_len=LENGTHS[case], prefill_s=1.0, gen=info(1.0))
    return dict(p, run=run_id, gen=info(BUDGET[run_id]), correct_full=correct_full, agreement=1)


def fidelity_part(run_id):
    p = {"case": "fidelity-f1", "kind": "fidelity", "desc": "emma 32000", "nll": [1.0, 2.0]}
    if run_id is None:
        return dict(p, prompt_len=32000, prefill_s=1.0, tf=info(1.0))
    return dict(p, run=run_id, kl=KL[run_id], top1=[1.0, 0.0], nll_full=[1.0, 2.0], tf=info(BUDGET[run_id]))


def make_dir(root, name, case_ids, model="qwen2.5-0.5b (GGUF)", only_answered=False):
    """A closed-loop results directory holding case_ids (manifest, parts; runs.jsonl's reference line).
    only_answered: the config's "only_where_reference_answers" (no run part where full attention is wrong)."""
    d = os.path.join(root, name)
    cases = [{"id": c, "kind": c.split("-")[0], "desc": c, "prompt_len": LENGTHS[c],
              "answer": "123456" if c.startswith("niah") else None} for c in case_ids]
    write(os.path.join(d, "manifest.json"), {"experiment": "closed-loop", "cases": cases, "model": {"name": model},
                                             "resolved": {"runs": RUNS},
                                             "config": {"only_where_reference_answers": only_answered}})
    write(os.path.join(d, "runs.jsonl"), {"run_id": "reference"})
    for c in case_ids:
        if c.startswith("fidelity"):
            write(os.path.join(d, "parts", "reference", c + ".json"), fidelity_part(None))
            for r in RUNS:
                write(os.path.join(d, "parts", r["id"], c + ".json"), fidelity_part(r["id"]))
            continue
        full, *by_run = ANSWERS[c]
        write(os.path.join(d, "parts", "reference", c + ".json"), niah_part(None, c, full, None))
        for r, ok in zip(RUNS, by_run):
            if ok is not None and (full or not only_answered):
                write(os.path.join(d, "parts", r["id"], c + ".json"), niah_part(r["id"], c, ok, full))
    return d


class Claims(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="retro-claims-")
        cls.a = make_dir(cls.tmp, "a", ["niah-a1", "niah-a2", "niah-a3", "niah-a4", "fidelity-f1"])
        cls.b = make_dir(cls.tmp, "b", ["niah-b1", "niah-b2"])
        cls.res = claims.claims([cls.a, cls.b])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def ctx(self, label):
        return next(c for c in self.res["contexts"] if c["label"] == label)

    def row(self, label, run_id):
        return next(r for r in self.ctx(label)["rows"] if r["run_id"] == run_id)

    def test_grouping(self):
        self.assertEqual([(c["model"], c["label"]) for c in self.res["contexts"]],
                         [("qwen2.5-0.5b (GGUF)", "16K"), ("qwen2.5-0.5b (GGUF)", "32K")])
        self.assertEqual(self.ctx("16K")["dirs"], [self.a])
        self.assertEqual(self.ctx("32K")["dirs"], [self.a, self.b])  # B's NIAH cases pooled with A's fidelity case
        ref16, ref32 = self.ctx("16K")["reference"], self.ctx("32K")["reference"]
        self.assertEqual((ref16["correct"], ref16["task_cases"], ref16["accuracy"]), (3, 4, 0.75))
        self.assertEqual((ref32["correct"], ref32["task_cases"], ref32["cases"], ref32["expected"]), (1, 2, 3, 3))

    def test_differences(self):
        r = self.row("16K", "oracle_topk-bbbb")  # 2/4 against full's 3/4
        self.assertEqual((r["accuracy"], r["full_accuracy"]), (0.5, 0.75))
        self.assertAlmostEqual(r["diff_points"], -25.0)
        self.assertAlmostEqual(r["accuracy_on_full_correct"], 2 / 3)
        self.assertEqual(r["label"], "oracle_topk k=100")
        self.assertAlmostEqual(r["exact_frac"], 0.02)
        r = self.row("32K", "oracle_topk-aaaa")  # answers the case full misses: above full
        self.assertAlmostEqual(r["diff_points"], 50.0)
        self.assertEqual((r["task_cases"], r["fidelity_cases"]), (2, 1))
        self.assertAlmostEqual(r["kl_mean"], 0.02)
        self.assertAlmostEqual(r["top1"], 0.5)
        self.assertAlmostEqual(r["ppl"], math.exp(1.5))  # exp(mean NLL [1, 2]) of the true continuation
        self.assertIsNone(self.row("16K", "oracle_topk-aaaa")["kl_mean"])  # no fidelity case at 16K

    def test_partial(self):
        r = self.row("16K", "streaming-dddd")  # niah-a4's part missing: full compared on a1..a3 only
        self.assertEqual((r["cases"], r["expected"], r["task_cases"]), (3, 4, 3))
        self.assertEqual((r["accuracy"], r["full_accuracy"], r["diff_points"]), (1.0, 1.0, 0.0))
        self.assertIn("| 3/4 cases |", claims.markdown(self.res))

    def test_common_cases(self):
        """--common: every row of a context on the cases all runs and the reference have (a4 is missing
        from streaming-dddd, so 16K keeps a1..a3 for every run)."""
        c = next(x for x in claims.claims([self.a, self.b], common=True)["contexts"] if x["label"] == "16K")
        self.assertEqual({(r["cases"], r["expected"]) for r in c["rows"]}, {(3, 3)})
        self.assertEqual((c["reference"]["cases"], c["reference"]["expected"]), (3, 3))
        r = next(r for r in c["rows"] if r["run_id"] == "oracle_topk-bbbb")
        self.assertNotEqual(r["cases"], self.row("16K", "oracle_topk-bbbb")["cases"])  # 4 without --common

    def test_methods_only_where_full_answers(self):
        """A directory whose config skips the methods on the cases full attention gets wrong (a4 here):
        a run is complete without them, full attention's own accuracy over all its cases stays reported."""
        d = make_dir(self.tmp, "only", ["niah-a1", "niah-a2", "niah-a4"], only_answered=True)
        # a part on the missed case from before the option was set: left out
        write(os.path.join(d, "parts", "oracle_topk-aaaa", "niah-a4.json"), niah_part("oracle_topk-aaaa", "niah-a4", True, False))
        for common in (False, True):
            c = claims.claims([d], common=common)["contexts"][0]
            self.assertTrue(c["methods_only_where_full_answers"])
            self.assertEqual({(r["cases"], r["expected"]) for r in c["rows"]}, {(2, 2)}, common)
            self.assertEqual({r["full_accuracy"] for r in c["rows"]}, {1.0})
            self.assertEqual((c["reference_all"]["correct"], c["reference_all"]["task_cases"]), (2, 3))
        self.assertEqual(c["reference"]["task_cases"], 2)  # --common: the reference on the runs' cases
        md = claims.markdown(claims.claims([d]))
        self.assertIn("The methods ran only on the cases full attention answers", md)
        self.assertIn("it answers 2 of its 3 NIAH cases here", md)
        self.assertIn("| 2/2 cases |", md)
        self.assertFalse(self.ctx("16K")["methods_only_where_full_answers"])  # a full grid: a4 expected

    def test_reference_accuracy(self):
        """--reference: full attention's own accuracy per context and variant, parsed from the builtin NIAH
        descriptions; a case present in two directories (a grid sharing a reference-only run's ids) once, and
        so is the same prompt under another case id (configs that differ elsewhere: prompts/<case>.json)."""
        def ref_dir(name, cases):
            d = os.path.join(self.tmp, name)
            write(os.path.join(d, "manifest.json"), {
                "experiment": "closed-loop", "model": {"name": "m"}, "resolved": {"runs": []},
                "cases": [{"id": c, "kind": "niah", "desc": desc, "prompt_len": n, "answer": "1"}
                          for c, desc, n, _, _ in cases]})
            for c, desc, n, ok, step in cases:
                write(os.path.join(d, "prompts", c + ".json"), prompts[c])
                write(os.path.join(d, "parts", "reference", c + ".json"),
                      {"case": c, "kind": "niah", "desc": desc, "answer": "1", "correct": ok, "tokens": [1],
                       "gen": info(1.0) | {"step_ms": [step]}})
            return d
        prompts = {"c1": [1, 2], "c2": [1, 3], "c3": [4], "c4": [5], "c9": [1, 3], "c7": [7]}
        x = ref_dir("refx", [("c1", "kjv 16000 d0.2 multikey shared", 16000, True, 100.0),
                             ("c2", "kjv 16000 d0.4 multikey shared", 16000, False, 300.0),
                             ("c3", "kjv 16000 d0.4 single shared", 16384, True, 200.0)])
        y = ref_dir("refy", [("c2", "kjv 16000 d0.4 multikey shared", 16000, False, 300.0),
                             ("c4", "emma 32000 d0.6 multikey shared", 32000, False, 400.0)])
        z = ref_dir("refz", [("c9", "kjv 16000 d0.4 multikey shared", 16000, False, 300.0),  # c2's prompt
                             ("c7", "kjv 16000 d0.2 multikey shared", 16000, True, 100.0)])  # c1's desc, not prompt
        rows = claims.reference_accuracy([x, y])
        got = [(r["label"], r["variant"], r["correct"], r["cases"], r["wrong"]) for r in rows]
        self.assertEqual(got, [("16K", "multikey", 1, 2, ["kjv d0.4"]), ("16K", "single", 1, 1, []),
                               ("32K", "multikey", 0, 1, ["emma d0.6"])])
        got = [(r["label"], r["variant"], r["correct"], r["cases"]) for r in claims.reference_accuracy([x, y, z])]
        self.assertEqual(got[0], ("16K", "multikey", 2, 3))
        self.assertEqual(rows[0]["step_ms_median"], 200.0)
        out = subprocess.run([sys.executable, "-B", *SCRIPT, "--reference", x, y], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("| m | 16K | multikey | 1/2 | kjv d0.4 | 0.20 s |", out.stdout)

    def test_order(self):
        self.assertEqual([r["run_id"] for r in self.ctx("16K")["rows"]],
                         ["oracle_topk-bbbb", "oracle_topk-aaaa", "streaming-cccc", "streaming-dddd"])

    def test_matched(self):
        m = {(x["method"], x["target"]): x for x in self.ctx("16K")["matched"]}
        self.assertEqual(len(m), 6)
        self.assertEqual(m[("oracle_topk", 0.018)]["run_id"], "oracle_topk-bbbb")
        self.assertEqual(m[("oracle_topk", 0.05)]["run_id"], "oracle_topk-aaaa")
        self.assertEqual(m[("oracle_topk", 0.10)]["run_id"], "oracle_topk-aaaa")  # its largest (5 %) is nearest
        self.assertEqual(m[("streaming", 0.018)]["run_id"], "streaming-cccc")
        self.assertEqual(m[("streaming", 0.05)]["run_id"], "streaming-cccc")  # 1.5 % is 3.5 pts off, 11 % 6
        self.assertEqual(m[("streaming", 0.10)]["run_id"], "streaming-dddd")
        self.assertEqual(m[("oracle_topk", 0.05)]["within"], "yes")  # 3/4 = full's 3/4
        self.assertEqual(m[("oracle_topk", 0.018)]["within"], "no")  # -25 points
        self.assertEqual(m[("streaming", 0.018)]["within"], "no")  # 1/4: -50 points
        m32 = {x["target"]: x for x in self.ctx("32K")["matched"] if x["method"] == "oracle_topk"}
        self.assertEqual((m32[0.018]["run_id"], m32[0.018]["within"]), ("oracle_topk-bbbb", "yes"))  # 1/2 = full's
        self.assertEqual((m32[0.05]["run_id"], m32[0.05]["within"]), ("oracle_topk-aaaa", "above"))  # 2/2: +50

    def test_matched_variants_at_one_budget(self):
        """Two runs of a method at the same budget (wave with and without its estimation zone: equal
        exact_frac) each get their matched line; the one 0.2 point off is a budget of its own."""
        def row(run_id, frac, acc):
            return {"run_id": run_id, "method": "wave", "label": run_id, "exact_frac": frac, "accuracy": acc,
                    "full_accuracy": 1.0, "diff_points": 100.0 * (acc - 1.0)}
        rows = [row("zone", 0.018, 1.0), row("nozone", 0.018, 0.75), row("other", 0.0205, 0.5)]
        at = [(x["run_id"], x["within"]) for x in claims.matched(rows) if x["target"] == 0.018]
        self.assertEqual(at, [("zone", "yes"), ("nozone", "no")])

    def test_other_model(self):
        c = make_dir(self.tmp, "c", ["niah-b1"], model="qwen2.5-1.5b")
        res = claims.claims([self.a, c, self.a])  # a directory given twice counts once
        self.assertEqual([(x["model"], x["label"]) for x in res["contexts"]],
                         [("qwen2.5-0.5b (GGUF)", "16K"), ("qwen2.5-0.5b (GGUF)", "32K"), ("qwen2.5-1.5b", "32K")])
        self.assertEqual(res["contexts"][0]["reference"]["expected"], 4)

    def test_command(self):
        out = subprocess.run([sys.executable, "-B", *SCRIPT, self.a, self.b], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("### qwen2.5-0.5b (GGUF) · 16K", out.stdout)
        self.assertIn("| oracle_topk k=100 | 2.0 | 50.0 | 75.0 | -25.0 | 66.7 | 4/4 cases | – | – |", out.stdout)
        self.assertIn("| streaming | 1.8 % | streaming sink=4,window=236 | 1.5 | 25.0 | 75.0 | -50.0 | no |", out.stdout)
        js = subprocess.run([sys.executable, "-B", *SCRIPT, "--json", self.a, self.b], capture_output=True, text=True)
        self.assertEqual(json.loads(js.stdout), json.loads(json.dumps(self.res)))

    def test_bad_dirs(self):
        empty = os.path.join(self.tmp, "empty")
        os.makedirs(empty, exist_ok=True)
        no_ref = make_dir(self.tmp, "noref", ["niah-b1"])
        shutil.rmtree(os.path.join(no_ref, "parts", "reference"))
        for d, missing in ((empty, "no manifest.json"), (no_ref, "no parts/reference/"),
                           (os.path.join(self.tmp, "nowhere"), "no such directory")):
            out = subprocess.run([sys.executable, "-B", *SCRIPT, self.a, d], capture_output=True, text=True)
            self.assertEqual(out.returncode, 2)
            self.assertEqual(out.stdout, "")
            self.assertEqual(len(out.stderr.strip().splitlines()), 1, out.stderr)
            self.assertIn(f"{d} is not a closed-loop results directory: {missing}", out.stderr)


if __name__ == "__main__":
    unittest.main()
