"""The closed loop's manifest.json under shards run side by side (closedloop/results.py; docs/results.md, "One
manifest, several shards"): no model, Debian's /usr/bin/python3, ~0.5 s.

- Two sessions of one directory interleaved (A starts, B starts, A records its cases and ends, B ends without
  them): both entries end with their own statuses and A's cases stay. Before the fix B rewrote the file from
  the copy it read at its start: A's entry came back "running" and A's cases were gone.
- A session starting marks "stale" an earlier "running" entry whose process is gone (its shard's lock file
  free, no lock recorded, or this shard's own file) and leaves one whose lock file is held; without
  retro-bench's lock ($RETRO_RESULTS_LOCK unset: a direct call) it cannot tell and marks nothing.
- An update waits while another process holds .lock-manifest, and .lock-manifest counts as a lock file
  (a --force of the directory keeps it)."""

import contextlib
import fcntl
import io
import json
import os
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from retro_bench.closedloop import results  # noqa: E402


@contextlib.contextmanager
def lock_env(value):
    old = os.environ.get("RETRO_RESULTS_LOCK")
    if value is None:
        os.environ.pop("RETRO_RESULTS_LOCK", None)
    else:
        os.environ["RETRO_RESULTS_LOCK"] = json.dumps(value)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("RETRO_RESULTS_LOCK", None)
        else:
            os.environ["RETRO_RESULTS_LOCK"] = old


def shard(i, n):
    return {"lock": f".lock-shard-{i}-of-{n}", "exclusive": False}


@contextlib.contextmanager
def held(path):
    """path locked exclusively by an open file description of this process, as a live shard holds its file."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class ManifestSessions(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        self.dir = os.path.join(self.root, "grid")

    def tearDown(self):
        self.tmp.cleanup()

    def open(self):
        return results.ResultsDir(self.root, "grid", resume=True, force=False)

    def manifest(self):
        with open(os.path.join(self.dir, "manifest.json")) as f:
            return json.load(f)

    def start(self, res, command, lock):
        err = io.StringIO()
        with lock_env(lock), contextlib.redirect_stderr(err):
            m = res.start_session({"name": "grid"}, {"runs": []}, command)
        return m, err.getvalue()

    def test_interleaved_shards_keep_each_others_sessions(self):
        a, b = self.open(), self.open()
        ma, _ = self.start(a, "run --shard 0/2", shard(0, 2))
        mb, _ = self.start(b, "run --shard 1/2", shard(1, 2))
        self.assertEqual(len(mb["sessions"]), 2)
        ma["cases"] = [{"id": "niah-1"}]
        a.save_manifest(ma)
        a.end_session(ma, "partial", wall_s=1.0)
        b.end_session(mb, "interrupted", wall_s=2.0)  # mb never saw A's end nor its cases
        m = self.manifest()
        self.assertEqual([(s["command"], s["status"]) for s in m["sessions"]],
                         [("run --shard 0/2", "partial"), ("run --shard 1/2", "interrupted")])
        self.assertEqual(m["cases"], [{"id": "niah-1"}])
        self.assertEqual([s["lock"] for s in m["sessions"]], [".lock-shard-0-of-2", ".lock-shard-1-of-2"])
        self.assertEqual({s["pid"] for s in m["sessions"]}, {os.getpid()})
        self.assertEqual(len({s["id"] for s in m["sessions"]}), 2)
        self.assertEqual(m["status"], "interrupted")  # the file's status: its last writer's

    def write_running(self, *sessions):
        os.makedirs(self.dir, exist_ok=True)
        results.write_json(os.path.join(self.dir, "manifest.json"), {"sessions": [
            {"start": f"2026-11-0{i + 1}T00:00:00Z", "command": f"old {i}", "status": "running", **s}
            for i, s in enumerate(sessions)]})

    def test_a_starting_session_marks_the_gone_ones_stale(self):
        self.write_running({"lock": ".lock-shard-1-of-3", "pid": 11, "host": "n1"},  # file free: gone
                           {"lock": ".lock-shard-2-of-3", "pid": 12, "host": "n1"},  # file held: alive
                           {"lock": ".lock-shard-0-of-3"},                            # our own file: gone
                           {},                                                      # no lock recorded: unsharded, gone
                           {"lock": ".lock-shard-1-of-3", "status": "complete"})
        res = self.open()
        with held(os.path.join(self.dir, ".lock-shard-2-of-3")):
            m, err = self.start(res, "new", shard(0, 3))
        self.assertEqual([s["status"] for s in m["sessions"]], ["stale", "running", "stale", "stale", "complete", "running"])
        self.assertEqual(self.manifest()["sessions"], m["sessions"])
        self.assertTrue(all("marked_stale_at" in s for s in m["sessions"] if s["status"] == "stale"))
        self.assertIn("started 2026-11-01T00:00:00Z, PID 11 on n1) ended without finishing (killed?); marked stale", err)
        self.assertEqual(err.count("marked stale"), 3)

    def test_the_whole_directory_proves_every_other_session_gone(self):
        self.write_running({"lock": ".lock-shard-2-of-3"})
        res = self.open()
        with held(os.path.join(self.dir, ".lock-shard-2-of-3")):  # cannot happen beside an exclusive .lock
            m, _ = self.start(res, "new", {"lock": ".lock", "exclusive": True})
        self.assertEqual(m["sessions"][0]["status"], "stale")

    def test_without_retro_benchs_lock_nothing_is_marked(self):
        self.write_running({"lock": ".lock-shard-1-of-3"}, {})
        m, err = self.start(self.open(), "direct", None)
        self.assertEqual([s["status"] for s in m["sessions"]], ["running", "running", "running"])
        self.assertNotIn("lock", m["sessions"][-1])
        self.assertEqual(err, "")

    def test_an_update_waits_for_the_manifest_lock(self):
        res = self.open()
        m, _ = self.start(res, "run", shard(0, 2))
        done = threading.Event()

        def end():
            res.end_session(m, "partial")
            done.set()

        with held(os.path.join(self.dir, results.MANIFEST_LOCK)):
            t = threading.Thread(target=end)
            t.start()
            self.assertFalse(done.wait(0.3), "the update did not wait for .lock-manifest")
            self.assertEqual(self.manifest()["sessions"][0]["status"], "running")
        t.join(10)
        self.assertTrue(done.is_set())
        self.assertEqual(self.manifest()["sessions"][0]["status"], "partial")

    def test_the_manifest_lock_is_a_lock_file(self):
        res = self.open()
        self.start(res, "run", shard(0, 2))
        self.assertTrue(os.path.exists(os.path.join(self.dir, results.MANIFEST_LOCK)))
        results.ResultsDir(self.root, "grid", resume=False, force=True)  # a direct --force
        self.assertEqual(sorted(os.listdir(self.dir)), [results.MANIFEST_LOCK, "parts"])


if __name__ == "__main__":
    unittest.main()
