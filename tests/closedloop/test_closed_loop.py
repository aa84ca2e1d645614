"""The closed loop (`retro-bench run` with "experiment": "closed-loop", retro_bench.closedloop), end to end on
the tiny random Llama of tests/dump (2 layers, GQA 4 q / 2 kv heads): every method runs inside the model's
decode through the retro_bench binding.

- exhaustive parameters (oracle k = all, wave retrieving every cluster, IVF probing every list, MagicPIG
  K = 0, full through the binding) equal the model's own attention: the same greedy tokens and
  KL(full || method) < 1e-6 at every teacher-forced position;
- a method that keeps only the sinks (streaming window 1) and oracle k = 4 measurably diverge, and with
  dense_layers covering every layer the sink-only method equals full again (the option works);
- resume: a second session computes nothing; a deleted part file is recomputed alone; a damaged one (cut
  short, emptied) is listed by `validate --results`, moved aside to NAME.damaged and recomputed;
- a budget sweep builds each index once per case (HeadMethod.clone) and equals its points run alone;
- bad input (unknown method or parameter, a model the loaders cannot read, a prompt beyond the model's
  context, --device cuda where torch sees no GPU) is a clear error before any model work; where torch
  has a GPU, --device cuda gives the CPU's results up to float rounding; a directory resumes only on the
  device it started on.

Needs the dump venv (scripts/setup.sh) and the package's core (build/python/retro_bench); without them the test exits 77
(ctest: skipped).
Environment: RETRO_BIN (retro-bench), RETRO_DUMP_VENV."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from closedloop_env import BIN, PKG, VENV  # noqa: E402 (exits 77 when a prerequisite is missing)

TMP = tempfile.mkdtemp(prefix="retro-closedloop-test-")
STEPS = 10  # teacher-forced positions scored and greedy tokens generated

EXHAUSTIVE = [
    {"name": "full"},
    {"name": "oracle_topk", "params": {"k": 100000}},
    {"name": "wave", "params": {"retrieval": 100000, "estimation": 0}},
    {"name": "faiss_ivf", "params": {"k": 100000, "nlist": 8, "nprobe": 8}},
    {"name": "magicpig", "params": {"K": 0, "L": 4}},
]
LOSSY = [
    {"name": "streaming", "params": {"sink": 4, "window": 1}},
    {"name": "oracle_topk", "params": {"k": 4}},
]


def tiny_config(name, methods, **extra):
    cfg = {"name": name, "experiment": "closed-loop", "model": "tiny-random-llama", "prefill_queries": 16,
           "threads": 1, "fidelity": {"random_prompt": 300, "continuation_tokens": STEPS, "greedy_tokens": STEPS},
           "methods": methods}
    cfg.update(extra)
    path = os.path.join(TMP, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def run(config, *args):
    return subprocess.run([BIN, "run", config, "--results", os.path.join(TMP, "results"), *args],
                          capture_output=True, text=True)


def records(name):
    with open(os.path.join(TMP, "results", name, "runs.jsonl")) as f:
        return [json.loads(line) for line in f]


def parts(name, run_id):
    with open(os.path.join(TMP, "results", name, "manifest.json")) as f:
        case = json.load(f)["cases"][0]["id"]
    with open(os.path.join(TMP, "results", name, "parts", run_id, case + ".json")) as f:
        return json.load(f)


class ClosedLoop(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cfg = tiny_config("tiny", EXHAUSTIVE + LOSSY)
        t0 = time.time()
        r = run(cls.cfg)
        if r.returncode != 0:
            raise AssertionError(f"closed loop failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-4000:]}")
        print(f"\n[time] tiny closed loop, {len(EXHAUSTIVE + LOSSY)} runs: {time.time() - t0:.1f} s", file=sys.stderr)
        cls.recs = {r["label"]: r for r in records("tiny")}
        cls.stdout = r.stdout

    def test_exhaustive_equals_full(self):
        ref = self.recs["full attention (the model's own, eager)"]
        self.assertEqual(ref["task"]["agreement_mean"], STEPS)
        exhaustive = [r for r in self.recs.values() if r["method"] != "reference" and r["method"] not in
                      ("streaming",) and not (r["method"] == "oracle_topk" and r["params"]["k"] == 4)]
        self.assertEqual(sorted({r["method"] for r in exhaustive}),
                         ["faiss_ivf", "full", "magicpig", "oracle_topk", "wave"])
        for r in exhaustive:
            part = parts("tiny", r["run_id"])
            self.assertEqual(len(part["kl"]), STEPS, r["label"])
            self.assertLess(max(part["kl"]), 1e-6, r["label"])         # KL(full || method) at every position
            self.assertEqual(part["tokens"], parts("tiny", "reference")["tokens"], r["label"])  # same greedy tokens
            self.assertEqual(part["agreement"], STEPS, r["label"])
            self.assertEqual(r["fidelity"]["top1"], 1.0, r["label"])
            self.assertAlmostEqual(r["fidelity"]["ppl"], ref["fidelity"]["ppl"], delta=1e-4 * ref["fidelity"]["ppl"])
            self.assertGreater(r["exact_frac"] + r["est_frac"], 0.99, r["label"])  # every token attended

    def test_sinks_only_diverges(self):
        for label in ("streaming(sink=4,window=1)", "oracle_topk(k=4)"):
            r = next(x for x in self.recs.values() if x["label"].startswith(label.split("(")[0]) and
                     all(f"{kv}" in x["label"] for kv in label[label.index("(") + 1:-1].split(",")))
            self.assertGreater(r["fidelity"]["kl_mean"], 1e-3, r["label"])
            self.assertLess(r["exact_frac"], 0.05, r["label"])
        s = next(x for x in self.recs.values() if x["method"] == "streaming")
        self.assertGreater(s["fidelity"]["kl_mean"], 0.1)
        self.assertLess(s["task"]["agreement_mean"], STEPS)
        self.assertLess(s["fidelity"]["top1"], 1.0)

    def test_dense_layers_cover_all(self):
        cfg = tiny_config("tiny-dense", LOSSY[:1], dense_layers=2)
        r = run(cfg)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        rec = [x for x in records("tiny-dense") if x["method"] == "streaming"][0]
        self.assertLess(rec["fidelity"]["kl_max"], 1e-9)
        self.assertEqual(rec["task"]["agreement_mean"], STEPS)

    def test_results_and_resume(self):
        d = os.path.join(TMP, "results", "tiny")
        for f in ("runs.jsonl", "cases.csv", "manifest.json"):
            self.assertTrue(os.path.exists(os.path.join(d, f)), f)
        with open(os.path.join(d, "manifest.json")) as f:
            m = json.load(f)
        self.assertEqual(m["status"], "complete")
        self.assertEqual(m["experiment"], "closed-loop")
        # retro-bench's host info (RETRO_HOST_JSON) reaches the manifest: the report's revision and BLAS
        self.assertTrue(m["host"].get("git_revision"), m["host"])
        self.assertIn("blas", m["host"])
        self.assertEqual(len(m["resolved"]["runs"]), len(EXHAUSTIVE + LOSSY))
        with open(os.path.join(d, "cases.csv")) as f:
            self.assertEqual(len(f.read().strip().splitlines()), 1 + len(EXHAUSTIVE + LOSSY))
        # an existing directory needs --resume or --force
        r = run(self.cfg)
        self.assertEqual(r.returncode, 2)
        self.assertIn("already holds results", r.stderr)
        # resume: nothing to do, no part rewritten; a deleted part is recomputed alone
        pdir = os.path.join(d, "parts")
        mt = {p: os.path.getmtime(os.path.join(pdir, p, f)) for p in os.listdir(pdir) for f in os.listdir(os.path.join(pdir, p))}
        before = records("tiny")
        victim = [x for x in before if x["method"] == "streaming"][0]["run_id"]
        shutil.rmtree(os.path.join(pdir, victim))
        r = run(self.cfg, "--resume")
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("1 run(s) to do", r.stderr)
        for p in os.listdir(pdir):
            for f in os.listdir(os.path.join(pdir, p)):
                if p not in (victim, "reference"):
                    self.assertEqual(os.path.getmtime(os.path.join(pdir, p, f)), mt[p], p)
        after = {x["run_id"]: x for x in records("tiny")}
        self.assertEqual(after[victim]["fidelity"]["kl_mean"],
                         [x for x in before if x["run_id"] == victim][0]["fidelity"]["kl_mean"])
        self.assertEqual([f for _, _, fs in os.walk(d) for f in fs if ".tmp-" in f], [])


class DamagedParts(unittest.TestCase):
    def test_damaged_parts_are_moved_aside_and_recomputed(self):
        """A method part cut short and an emptied reference part (issue 43 #3): `validate --results` lists
        both (exit 2); a resumed session moves each aside to NAME.damaged (the reference's .npy with it),
        says so in one line each, recomputes them, and the records equal the undamaged run's."""
        cfg = tiny_config("tiny-damaged", LOSSY[:1])
        r = run(cfg)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        before = records("tiny-damaged")
        d = os.path.join(TMP, "results", "tiny-damaged")
        with open(os.path.join(d, "manifest.json")) as f:
            case = json.load(f)["cases"][0]["id"]
        method = [x for x in before if x["method"] == "streaming"][0]["run_id"]
        cut = os.path.join(d, "parts", method, case + ".json")
        emptied = os.path.join(d, "parts", "reference", case + ".json")
        npy = emptied[:-len(".json")] + ".npy"
        self.assertTrue(os.path.exists(npy))
        os.truncate(cut, 100)
        os.truncate(emptied, 0)
        r = subprocess.run([BIN, "validate", "--results", d], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(f"{cut}: damaged (truncated JSON (ends after 100 bytes, inside a value))", r.stdout)
        self.assertIn(f"{emptied}: damaged (empty file)", r.stdout)
        self.assertEqual(r.stdout.count(": damaged ("), 2, r.stdout)

        r = run(cfg, "--resume")
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertNotIn("Traceback", r.stderr)
        lines = [x.split("warning: ", 1)[-1] for x in r.stderr.splitlines() if ": damaged (" in x]
        self.assertEqual(len(lines), 2, r.stderr[-3000:])
        self.assertIn(f"{cut}: damaged (truncated JSON (ends after 100 bytes, inside a value)); moved to {cut}.damaged, "
                      "its unit will be recomputed", lines)
        self.assertIn(f"{emptied}: damaged (empty file); moved to {emptied}.damaged (with {case}.npy), its unit will "
                      "be recomputed", lines)
        for path, size in ((cut, 100), (emptied, 0)):
            self.assertEqual(os.path.getsize(path + ".damaged"), size, path)
            with open(path) as f:
                self.assertEqual(json.load(f)["case"], case)  # recomputed
        self.assertTrue(os.path.exists(npy + ".damaged") and os.path.exists(npy))
        after = records("tiny-damaged")
        for a, b in zip(before, after):
            self.assertEqual((a["run_id"], a["fidelity"], a["task"]), (b["run_id"], b["fidelity"], b["task"]))
        r = subprocess.run([BIN, "validate", "--results", d], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class SharedBuild(unittest.TestCase):
    def test_budget_sweep_builds_once_and_equals_separate_builds(self):
        """Runs that differ only in search-time parameters (a budget sweep) build each index once per
        case and decode on copies of it: every loop after the first reports build_shared, and the
        results equal those of the same point run alone (its own build)."""
        sweep = [{"name": "faiss_hnsw", "params": {"k": [4, 12], "sink": 2, "window": 4}},
                 {"name": "retrieval_attention", "params": {"k": [4, 12], "sink": 2, "window": 4, "nq": 8}}]
        alone = [{"name": m["name"], "params": dict(m["params"], k=12)} for m in sweep]
        for name, methods in (("tiny-sweep", sweep), ("tiny-alone", alone)):
            r = run(tiny_config(name, methods))
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        recs = {x["run_id"]: x for x in records("tiny-sweep") if x["method"] != "reference"}
        self.assertEqual(len(recs), 4)
        for rid, rec in recs.items():
            p = parts("tiny-sweep", rid)
            first = rec["params"]["k"] == 4  # the first point of its method builds, the second copies
            self.assertEqual(p["tf"]["build_shared"], not first, rec["label"])
            self.assertTrue(p["gen"]["build_shared"], rec["label"])  # the greedy loop copies the kept build
            if first:
                continue
            q = parts("tiny-alone", rid)  # the same run id: the same point, built on its own there
            self.assertFalse(q["tf"]["build_shared"])
            self.assertGreater(max(p["kl"]), 1e-4, rec["label"])  # lossy: the comparison can tell runs apart
            for key in ("kl", "tokens"):
                self.assertEqual(p[key], q[key], f"{rec['label']}: {key}")
            for loop in ("tf", "gen"):
                self.assertEqual(p[loop]["exact_frac"], q[loop]["exact_frac"], rec["label"])
        # workers (closed_loop --worker I/N) take whole groups of runs that share a build: worker 0 the
        # HNSW budgets, worker 1 RetrievalAttention's; their parts equal the single session's
        cfg = tiny_config("tiny-workers", sweep)
        runs = [{"method": m["name"], "params": dict(m["params"], k=k), "label": f"{m['name']} k={k}"}
                for m in sweep for k in m["params"]["k"]]
        env = dict(os.environ, PYTHONPATH=PKG)
        for i in (0, 1):
            r = subprocess.run([os.path.join(VENV, "bin", "python"), "-B", "-m", "retro_bench.closedloop.closed_loop",
                                cfg, "--runs-json", json.dumps(runs), "--results", os.path.join(TMP, "results"),
                                "--worker", f"{i}/2"] + (["--resume"] if i else []), capture_output=True, text=True, env=env)
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
            done = sorted(d.split("-")[0] for d in os.listdir(os.path.join(TMP, "results", "tiny-workers", "parts"))
                          if d != "reference")
            self.assertEqual(done, ["faiss_hnsw"] * 2 if i == 0 else ["faiss_hnsw"] * 2 + ["retrieval_attention"] * 2)
        for rid in recs:
            p, q = parts("tiny-sweep", rid), parts("tiny-workers", rid)
            self.assertEqual((p["kl"], p["tokens"], p["tf"]["build_shared"]), (q["kl"], q["tokens"], q["tf"]["build_shared"]))


class Interrupted(unittest.TestCase):
    def test_sigterm_interrupts_cleanly_and_resumes(self):
        """SIGTERM (Slurm's time limit, a kill) stops a sweep as Ctrl-C does: the manifest says
        "interrupted" and lists the cases (written once they are built, so a running sweep can be read),
        no temporary file is left, and --resume completes it."""
        import signal
        cfg = tiny_config("tiny-term", EXHAUSTIVE + LOSSY)
        d = os.path.join(TMP, "results", "tiny-term")
        p = subprocess.Popen([BIN, "run", cfg, "--results", os.path.join(TMP, "results")], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.time() + 120
        while time.time() < deadline and not (os.path.isdir(os.path.join(d, "parts")) and
                                               len(os.listdir(os.path.join(d, "parts"))) >= 2):
            time.sleep(0.05)
        with open(os.path.join(d, "manifest.json")) as f:
            self.assertEqual(len(json.load(f)["cases"]), 1)  # the running sweep's cases are on disk
        os.killpg(p.pid, signal.SIGTERM)
        p.communicate(timeout=60)
        status = None
        while time.time() < deadline:  # the runner (retro-bench's child) writes its status as it stops
            with open(os.path.join(d, "manifest.json")) as f:
                status = json.load(f)["status"]
            if status != "running":
                break
            time.sleep(0.1)
        self.assertEqual(status, "interrupted")
        self.assertEqual([f for _, _, fs in os.walk(d) for f in fs if ".tmp-" in f], [])
        r = run(cfg, "--resume")
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertEqual(len(records("tiny-term")), 1 + len(EXHAUSTIVE + LOSSY))


def gone_within(pid, seconds):
    """True once `pid` is no live process (gone, or a zombie: dead, not reaped) within `seconds`."""
    from retro_bench.lifeline import alive  # the liveness the closed loop's processes judge their parent by
    end = time.time() + seconds
    while alive(pid) and time.time() < end:
        time.sleep(0.005)
    return not alive(pid)


class OneWriter(unittest.TestCase):
    """One writer per results directory (issue 43 #1-#2): the closed loop takes retro-bench's results lock
    and its model process holds it too; a second run is refused naming the live writer; a SIGKILL of
    retro-bench ends the model process within a second, and a --resume started at once waits for the lock
    rather than running beside it, then completes as an uninterrupted run would, marking stale the sessions
    whose processes are gone (docs/results.md, "One manifest, several shards")."""

    def test_second_run_refused_and_sigkill_leaves_no_orphan(self):
        import signal
        cfg = tiny_config("tiny-lock", EXHAUSTIVE[:2] + LOSSY, fidelity={"random_prompt": 300,
                                                                        "continuation_tokens": 40,
                                                                        "greedy_tokens": 40})
        results = os.path.join(TMP, "results")
        d = os.path.join(results, "tiny-lock")
        p = subprocess.Popen([BIN, "run", cfg, "--results", results], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        writer = None
        while time.time() < deadline and writer is None and p.poll() is None:
            try:
                with open(os.path.join(d, ".lock")) as f:
                    writer = json.load(f)["writers"][0]["pid"]
            except (OSError, ValueError, KeyError, IndexError):
                time.sleep(0.01)
        self.assertIsNotNone(writer, "the model process never showed up in the lock file")
        os.kill(p.pid, signal.SIGSTOP)  # retro-bench held still; its model process carries on writing
        try:
            for flags in ([], ["--resume"], ["--force"]):
                r = subprocess.run([BIN, "run", cfg, "--results", results, *flags], capture_output=True, text=True)
                self.assertEqual(r.returncode, 2, flags)
                self.assertIn(f"is in use by PID {p.pid} on host", r.stderr)
                self.assertIn(f"with its writer PID {writer} (since", r.stderr)
                self.assertIn("closed loop: " + os.path.join(VENV, "bin", "python") + " -m retro_bench.closedloop.closed_loop", r.stderr)
        finally:
            os.kill(p.pid, signal.SIGKILL)  # kills a stopped process too; nothing can be passed on
            p.wait()
        self.assertTrue(gone_within(writer, 1.0),
                        f"the model process {writer} outlived retro-bench's SIGKILL by more than a second")
        # a session the killed run may have left "running" (it may also have finished meanwhile), and one as
        # a SIGKILLed shard leaves it: the resume (the whole directory's lock) marks both stale
        mpath = os.path.join(d, "manifest.json")
        with open(mpath) as f:
            m = json.load(f)
        m["sessions"].append({"start": "2026-11-01T00:00:00Z", "command": "a killed shard", "status": "running",
                              "pid": 1, "host": "elsewhere", "lock": ".lock-shard-0-of-2"})
        with open(mpath, "w") as f:
            json.dump(m, f)
        r = subprocess.run([BIN, "run", cfg, "--results", results, "--resume", "--wait-lock"], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertEqual(len(records("tiny-lock")), 1 + len(EXHAUSTIVE[:2] + LOSSY))
        self.assertEqual([f for _, _, fs in os.walk(d) for f in fs if ".tmp-" in f], [])
        with open(mpath) as f:
            sessions = json.load(f)["sessions"]
        self.assertIn(sessions[0]["status"], ("stale", "complete"))  # never left "running"
        self.assertEqual((sessions[0]["lock"], sessions[0]["pid"]), (".lock", writer))  # $RETRO_RESULTS_LOCK
        self.assertEqual([s["status"] for s in sessions[1:]], ["stale", "complete"])
        self.assertIn("(started 2026-11-01T00:00:00Z, PID 1 on elsewhere) ended without finishing", r.stderr)


def venv_has_cuda():
    r = subprocess.run([os.path.join(VENV, "bin", "python"), "-c",
                        "import torch; print(int(torch.backends.cuda.is_built() and torch.cuda.is_available()))"],
                       capture_output=True, text=True)
    return r.stdout.strip() == "1"


class Device(unittest.TestCase):
    """--device (issue 27 #5): the model on torch's GPU, the methods on the host through the binding."""

    def test_cuda_runs_where_torch_has_a_gpu_else_is_refused_before_work(self):
        cfg = tiny_config("tiny-cuda", EXHAUSTIVE[:2] + LOSSY[:1])
        d = os.path.join(TMP, "results", "tiny-cuda")
        r = run(cfg, "--device", "cuda")
        if not venv_has_cuda():  # this machine: a clear refusal before the model loads or anything is written
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr[-3000:])
            self.assertIn("--device cuda: ", r.stderr)
            self.assertIn("--device cpu", r.stderr)
            self.assertNotIn("Traceback", r.stderr)
            self.assertFalse(os.path.exists(d))
            return
        # a GPU: the forward passes there give what the CPU's give, up to float rounding, and an exhaustive
        # method equals the GPU reference as on the CPU
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        with open(os.path.join(d, "manifest.json")) as f:
            self.assertTrue(json.load(f)["model"]["device"].startswith("cuda: "))
        cpu = tiny_config("tiny-cpu", EXHAUSTIVE[:2] + LOSSY[:1])
        self.assertEqual(run(cpu).returncode, 0)
        on = {x["label"]: x for x in records("tiny-cuda")}
        off = {x["label"]: x for x in records("tiny-cpu")}
        for label, x in on.items():
            self.assertAlmostEqual(x["fidelity"]["ppl"], off[label]["fidelity"]["ppl"],
                                   delta=1e-3 * off[label]["fidelity"]["ppl"], msg=label)
            if x["method"] in ("full", "oracle_topk") and "k=4" not in label:
                self.assertLess(max(parts("tiny-cuda", x["run_id"])["kl"]), 1e-5, label)

    def test_a_directory_continues_on_the_device_it_started_on(self):
        cfg = tiny_config("tiny-dev", LOSSY[:1])
        self.assertEqual(run(cfg).returncode, 0)
        m = os.path.join(TMP, "results", "tiny-dev", "manifest.json")
        with open(m) as f:
            manifest = json.load(f)
        self.assertEqual(manifest["model"]["device"], "cpu")
        manifest["model"]["device"] = "cuda: a GPU"  # as if a GPU session had started it
        with open(m, "w") as f:
            json.dump(manifest, f)
        r = run(cfg, "--resume")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr[-3000:])
        self.assertIn("was computed with --device cuda", r.stderr)
        with open(m) as f:
            self.assertEqual(len(json.load(f)["sessions"]), 1)  # refused before a session was recorded


PATCH_CHECK = r"""
import sys, numpy as np, torch, transformers
from retro_bench.dump import model_loading
from retro_bench.closedloop.attention_patch import AttentionPatch
ref = model_loading.tiny_random_llama(torch, transformers, seed=3).eval()
pat = model_loading.tiny_random_llama(torch, transformers, seed=3).eval()
patch = AttentionPatch(pat, torch)
patch.fast_exact = sys.argv[1] == "fast"
ids = torch.tensor([list(np.random.default_rng(0).integers(3, 500, size=200))])
worst = 0.0
with torch.no_grad():
    for m in (ref, pat):
        m.out = m(ids, use_cache=True)
    for t in range(5):  # decode steps on the caches
        nxt = ref.out.logits[:, -1].argmax(-1, keepdim=True)
        for m in (ref, pat):
            m.out = m(nxt, past_key_values=m.out.past_key_values, use_cache=True)
        worst = max(worst, float((ref.out.logits - pat.out.logits).abs().max()))
print("max_abs_logit", float(ref.out.logits.abs().max()), "max_abs_logit_diff", worst)
"""


class Patch(unittest.TestCase):
    def check(self, mode):
        r = subprocess.run([os.path.join(VENV, "bin", "python"), "-B", "-c", PATCH_CHECK, mode],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=PKG))
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        words = r.stdout.split()
        return float(words[-3]), float(words[-1])

    def test_patched_exact_path_equals_transformers(self):
        """The patch's exact-attention path (the reference run) computes what transformers' eager
        LlamaAttention computes: the same logits in prefill and decode."""
        _, diff = self.check("eager")
        self.assertLess(diff, 1e-5)

    def test_fast_exact_equals_eager_up_to_rounding(self):
        """The prefill's rearranged exact attention (AttentionPatch._exact_attention: per KV head, q
        scaled first, other matrix shapes) differs from the eager operations only by float rounding:
        prefill and decode logits within 1e-5 of the logits' scale (a wrong mask or head mapping is off
        by O(1))."""
        scale, diff = self.check("fast")
        self.assertGreater(scale, 1.0)
        self.assertLess(diff, 1e-5 * scale)


PREFIX_CHECK = r"""
import json, sys, numpy as np
from retro_bench.closedloop import model_runner
rng = np.random.default_rng(5)
a = [int(x) for x in rng.integers(3, 500, size=600)]
b = a[:450] + [int(x) for x in rng.integers(3, 500, size=170)]   # 620 tokens, 450 shared
c = [7] + a[1:]                                                  # differs at position 0
out = {}
def same(x, y):
    return bool(np.array_equal(x, y))
shared = model_runner.LoadedModel("tiny-random-llama", threads=1, seed=2)
fresh = model_runner.LoadedModel("tiny-random-llama", threads=1, seed=2)
shared.prefill(a, 100, chunk=128)
lp_s, q_s = shared.prefill(b, 100, chunk=128)        # reuses a's cache up to 384 (3 chunks)
out["reused_b"] = shared.reused_tokens
lp_f, q_f = fresh.prefill(b, 100, chunk=128)
out["fresh_reused"] = fresh.reused_tokens
out["logp_equal"] = same(lp_s, lp_f)
out["queries_equal"] = all(same(q_s[l], q_f[l]) for l in q_f)
out["kv_equal"] = all(same(shared.cache.key_cache[l], fresh.cache.key_cache[l]) and
                      same(shared.cache.value_cache[l], fresh.cache.value_cache[l]) for l in range(shared.n_layers))
shared.prefill(b[:-60], 100, chunk=128)              # its first recorded query (460) lies before b's (520)
out["reused_shorter"] = shared.reused_tokens
shared.prefill(c, 100, chunk=128)
out["reused_c"] = shared.reused_tokens
# a kept prefill serves only the same prompt with the same number of recorded queries
import os, tempfile
path = os.path.join(tempfile.mkdtemp(), "p.pt")
lp_b, q_b = shared.prefill(b, 100, chunk=128)
shared.save_prefill(path, lp_b, q_b)
out["load_same"] = shared.load_prefill(path, b, 100) is not None
out["load_other_ids"] = shared.load_prefill(path, b[:-1] + [b[-1] % 400 + 5], 100) is None
out["load_other_queries"] = shared.load_prefill(path, b, 50) is None
# a resumed session (a new model, nothing held) seeds b's prefill from a's kept prefill: the same 384
# positions reused, the same result as from scratch; c shares nothing with a kept prompt: no seed
import types
from retro_bench.closedloop import closed_loop
res = types.SimpleNamespace(dir=tempfile.mkdtemp())
cfg = {"prefill_queries": 100, "prefill_chunk": 128}
cases = [{"id": "A", "ids": a}, {"id": "B", "ids": b}, {"id": "C", "ids": c}]
lp_a, q_a = shared.prefill(a, 100, chunk=128)
os.makedirs(os.path.join(res.dir, "prefill"))
shared.save_prefill(closed_loop.prefill_path(res, "A"), lp_a, q_a)
resumed = model_runner.LoadedModel("tiny-random-llama", threads=1, seed=2)
out["seed_b"] = closed_loop.seed_from_kept_prefill(resumed, res, cfg, cases[1], cases)
lp_r, q_r = resumed.prefill(b, 100, chunk=128)
out["seeded_reused"] = resumed.reused_tokens
out["seeded_equal"] = same(lp_r, lp_f) and all(same(q_r[l], q_f[l]) for l in q_f)
out["seed_c"] = closed_loop.seed_from_kept_prefill(model_runner.LoadedModel("tiny-random-llama", threads=1, seed=2),
                                                   res, cfg, cases[2], cases)
print(json.dumps(out))
"""


class PrefixReuse(unittest.TestCase):
    def test_reused_prefix_is_bit_equal(self):
        """LoadedModel.prefill on a prompt sharing 450 tokens with the previous one reuses its cache up
        to the chunk boundary below (384 with chunks of 128) and gives exactly what a prefill from scratch
        gives: first log-probs, recorded queries (some of them copied from the previous prompt's), KV."""
        r = subprocess.run([os.path.join(VENV, "bin", "python"), "-B", "-c", PREFIX_CHECK],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=PKG))
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        out = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual(out["reused_b"], 384)
        self.assertEqual(out["fresh_reused"], 0)
        self.assertTrue(out["logp_equal"])
        self.assertTrue(out["queries_equal"])
        self.assertTrue(out["kv_equal"])
        self.assertEqual(out["reused_shorter"], 384)  # min(common 560, first query 460) -> 384
        self.assertEqual(out["reused_c"], 0)
        self.assertTrue(out["load_same"])
        self.assertTrue(out["load_other_ids"])       # same length, another prompt: not this prefill
        self.assertTrue(out["load_other_queries"])   # another prefill_queries: recomputed
        self.assertEqual(out["seed_b"], ["A", 384])      # a new session: a's kept prefill seeds b's
        self.assertEqual(out["seeded_reused"], 384)
        self.assertTrue(out["seeded_equal"])
        self.assertIsNone(out["seed_c"])


class Metrics(unittest.TestCase):
    """retro_bench.closedloop.metrics on hand-worked values."""

    @classmethod
    def setUpClass(cls):
        from retro_bench.closedloop import metrics
        cls.m = metrics

    def test_kl_top1_nll(self):
        import numpy as np
        p = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]))
        q = np.log(np.array([[0.25, 0.5, 0.25], [0.1, 0.8, 0.1]]))
        f = self.m.fidelity(p, q, [0, 2])
        self.assertAlmostEqual(f["kl"][0], 0.5 * np.log(2) + 0.25 * np.log(0.5), places=12)  # 0.25 ln 2
        self.assertAlmostEqual(f["kl"][1], 0.0, places=12)
        self.assertEqual(f["top1"], [0.0, 1.0])
        self.assertAlmostEqual(f["nll"][0], np.log(4), places=12)
        self.assertAlmostEqual(f["nll"][1], np.log(10), places=12)

    def test_agreement_and_exact_match(self):
        self.assertEqual(self.m.agreement([1, 2, 3, 4], [1, 2, 9, 4]), 2)
        self.assertEqual(self.m.agreement([1, 2], [1, 2]), 2)
        self.assertEqual(self.m.agreement([5], [1]), 0)
        self.assertTrue(self.m.exact_match(" 468278.", "468278"))
        self.assertFalse(self.m.exact_match(" 46827.", "468278"))

    def test_spearman(self):
        self.assertAlmostEqual(self.m.spearman([1, 2, 3, 4], [10, 20, 30, 40]), 1.0)
        self.assertAlmostEqual(self.m.spearman([1, 2, 3, 4], [4, 3, 2, 1]), -1.0)
        self.assertAlmostEqual(self.m.spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]), 0.8207826816681233)  # ties
        self.assertIsNone(self.m.spearman([1, 2, 3], [1, 1, 1]))
        self.assertIsNone(self.m.spearman([1, 2], [1, 2]))


class OfflineOnline(unittest.TestCase):
    """offline_online.correlate matches (method, params) points and ranks them; the offline_online
    figure's data comes from the file it writes."""

    def test_correlate_and_figure_data(self):
        from retro_bench.closedloop import offline_online
        from retro_bench.plotting import figures as F
        from retro_bench.plotting import results as R
        closed = [{"method": "reference", "label": "full", "params": {}}]
        opened = []
        for i in range(5):  # recall rises with k, KL falls: rho(recall, KL) = -1, rho(out_err, KL) = +1
            p = {"k": 10 * (i + 1)}
            closed.append({"method": "oracle_topk", "label": f"k={p['k']}", "params": p, "exact_frac": 0.01 * i,
                           "fidelity": {"kl_mean": 1.0 / (i + 1), "top1": 0.5 + 0.1 * i, "ppl": 70 - i},
                           "task": {"accuracy": [0, 0, 1, 1, 1][i], "agreement_mean": i}})
            opened.append({"method": "oracle_topk", "params": p, "metrics": {
                "recall@100": {"mean": 0.5 + 0.1 * i}, "mass": {"mean": 0.9 + 0.01 * i}, "out_err": {"mean": 0.5 - 0.1 * i}}})
        opened.append({"method": "pq", "params": {"k": 1}, "metrics": {}})  # no closed-loop twin: left out
        out = offline_online.correlate(opened, closed)
        self.assertEqual(len(out["points"]), 5)
        rho = {(t["open"], t["closed"]): t["spearman"] for t in out["table"]}
        self.assertAlmostEqual(rho[("recall@100", "kl_mean")], -1.0)
        self.assertAlmostEqual(rho[("out_err", "kl_mean")], 1.0)
        self.assertAlmostEqual(rho[("mass", "top1")], 1.0)
        self.assertGreater(rho[("recall@100", "niah_accuracy")], 0.8)
        d = os.path.join(TMP, "oo-results")
        os.makedirs(d)
        with open(os.path.join(d, "offline-online.json"), "w") as f:
            json.dump(out, f)
        with open(os.path.join(d, "runs.jsonl"), "w") as f:
            f.write(json.dumps(closed[1]) + "\n")
        s = F.FIGURES["offline_online"].data(R.Results(d))
        self.assertEqual(len(s["panels"]), 6)  # (KL, accuracy) x (recall@100, mass, out_err)
        self.assertAlmostEqual(s["panels"][0]["spearman"], -1.0)
        self.assertEqual(len(s["panels"][0]["points"]), 5)


class BadInput(unittest.TestCase):
    def expect_error(self, cfg, *needles):
        t0 = time.time()
        r = run(cfg, "--force")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr[-3000:])
        for n in needles:
            self.assertIn(n, r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        return time.time() - t0

    def test_unknown_method_and_parameter(self):
        self.expect_error(tiny_config("bad1", [{"name": "no_such_method"}]), "no_such_method")
        self.expect_error(tiny_config("bad2", [{"name": "oracle_topk", "params": {"kk": 3}}]), "kk")
        self.expect_error(tiny_config("bad3", [{"name": "full"}], tasks={}), "unknown key 'tasks'")
        self.expect_error(tiny_config("bad4", [{"name": "full"}], fidelity={"random_prompt": 50, "steps": 3}),
                          "fidelity: unknown key 'steps'")
        for n in ("bad1", "bad2", "bad3"):  # refused before anything is written
            self.assertFalse(os.path.exists(os.path.join(TMP, "results", n)))

    def test_unreadable_model(self):
        for model, msg in ((os.path.join(TMP, "nope.gguf"), "model file not found"),
                           (TMP, "has no config.json: not a Hugging Face checkpoint directory")):
            cfg = tiny_config("badmodel", [{"name": "full"}], model=model)
            self.expect_error(cfg, msg)
            self.assertFalse(os.path.exists(os.path.join(TMP, "results", "badmodel")))

    def test_beyond_context(self):
        cfg = tiny_config("long", [{"name": "full"}], fidelity={"random_prompt": 4090, "continuation_tokens": 10})
        self.expect_error(cfg, "exceeds the model's context (4096 tokens", "allow_beyond_context")
        self.assertFalse(os.path.exists(os.path.join(TMP, "results", "long")))
        cfg = tiny_config("long-smol", [{"name": "full"}], model="smollm2",
                          niah={"texts": ["mobydick"], "prompt_tokens": [9000], "depths": [0.5]})
        self.expect_error(cfg, "niah.prompt_tokens 9000", "exceeds the model's context (8192 tokens")


if __name__ == "__main__":
    try:
        unittest.main(verbosity=2)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
