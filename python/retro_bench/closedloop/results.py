"""Result files of a closed-loop experiment (docs/results.md, "closed-loop experiment"):

  parts/<run_id>/<case_id>.json   one (run, case): per-position fidelity samples or the greedy tokens,
                                  selection statistics, build and per-step times; the unit of --resume
                                  (parts/reference/<case_id>.npy: the reference's log-probabilities;
                                  a damaged part is moved aside to NAME.damaged on --resume)
  prefill/<case_id>.pt            the prompt's prefill state (KV cache, prefill queries), for resuming
  runs.jsonl                      one aggregated record per run (reference first), config order
  cases.csv                       one row per (run, case)
  manifest.json                   status, config as given, resolved runs, cases, host, sessions

Every file is written to a temporary name and renamed into place (retro_bench.atomic). Shards of the cases
run side by side and share manifest.json: each change to it is a read-modify-write under an exclusive flock
of `.lock-manifest` that keeps the other sessions' entries (a session rewrote the whole file from its own
copy before, so a shard ending later set back the sessions that had ended meanwhile to "running"), and a
session whose process is gone (its results lock free: lib/bench/results_lock.hpp) is marked "stale" when
the next one starts, as retro-bench's own runner does."""

import contextlib
import fcntl
import json
import os
import platform
import shutil
import socket
import sys
import time
import uuid

from ..atomic import temp_writer_gone, write_text


def write_json(path, obj):
    write_text(path, json.dumps(obj, indent=1) + "\n")


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class ResultsError(Exception):
    pass


MAIN_LOCK = ".lock"
MANIFEST_LOCK = ".lock-manifest"  # serializes the updates of manifest.json (held for milliseconds)


def _is_lock_file(name):
    """retro-bench's lock files (lib/bench/results_lock.hpp): held by retro-bench and inherited by this
    process, never deleted (a second run would lock a new file beside the held one)."""
    return name in (MAIN_LOCK, MANIFEST_LOCK) or name.startswith(".lock-shard-")


def held_exclusively(path):
    """Whether a process holds an exclusive flock on path (this one's inherited lock included): probed
    with a shared lock that is not waited for, as results_lock.cpp's held_exclusively."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the probe's lock, if it got one


def own_lock():
    """The results lock retro-bench took for this process ($RETRO_RESULTS_LOCK: {"lock": its file's name,
    "exclusive": whether it holds the whole directory}), or None when run without retro-bench."""
    text = os.environ.get("RETRO_RESULTS_LOCK")
    if not text:
        return None
    lock = json.loads(text)
    return {"lock": str(lock["lock"]), "exclusive": bool(lock["exclusive"])}


def session_gone(results_dir, session, mine):
    """Whether the process of a session recorded as running is gone (lib/bench/results_lock.cpp's
    lock_holder_gone): we hold the whole directory; it ran unsharded (it held .lock exclusively, which our
    shared lock proves released); it held our own shard's file; or its file is not held now. Without a
    lock of our own (a direct call) nothing can be told."""
    if mine is None:
        return False
    if mine["exclusive"]:
        return True
    name = session.get("lock") or MAIN_LOCK
    if name == MAIN_LOCK or name == mine["lock"]:
        return True
    return not held_exclusively(os.path.join(results_dir, name))


# Damaged parts (docs/results.md, "Damaged parts"): parts are written atomically, so a run never leaves a
# half-written one; a disk fault, an interrupted copy or a hand edit can. A part that does not parse, is not
# a part, or holds another unit's key is damaged: a resumed session moves it aside to NAME.damaged and
# recomputes it. The same rules and words as retro-bench's C++ side (lib/bench/damaged_parts.cpp), which
# `retro-bench validate --results DIR` uses to list them.
REFERENCE = "reference"  # the model's own exact attention: its parts have no "run"


def parse_part_text(data):
    """(object, "") for the bytes of a part file that parse, else (None, what is wrong in words)."""
    if not data.strip():
        return None, "empty file" if not data else "empty file (whitespace only)"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not JSON (not UTF-8 text: {e})"
    try:
        return json.loads(text), ""
    except json.JSONDecodeError as e:
        # the parser ran out of text inside a value (an unclosed string, array or object): cut short
        if e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string"):
            return None, f"truncated JSON (ends after {len(data)} bytes, inside a value)"
        return None, f"not JSON (parse error at line {e.lineno}, column {e.colno}: {e.msg})"


def part_damage(obj, run_id, case_id):
    """What is wrong with the parsed part `obj` of parts/<run_id>/<case_id>.json ("" when nothing): its
    "case" is case_id and its "run" is run_id (the reference has none)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("case"), str):
        return 'not a part (expected a JSON object with a "case")'
    if obj["case"] != case_id or (("run" in obj) if run_id == REFERENCE else obj.get("run") != run_id):
        of = f"run {json.dumps(obj['run'])}" if "run" in obj else "the reference"
        return f"another unit's part: it holds case {obj['case']} of {of} (copied?)"
    return ""


def npy_damage(path):
    """What is wrong with a .npy file ("" when nothing): its header reads, and its size is the one the
    header's dtype and shape give (a truncated copy is shorter). The data is not read."""
    import numpy as np
    size = os.path.getsize(path)
    if size == 0:
        return "empty file"
    with open(path, "rb") as f:
        try:
            fmt = np.lib.format  # np.save writes version 1.0; 2.0 for headers over 64 KiB
            read = fmt.read_array_header_1_0 if fmt.read_magic(f) == (1, 0) else fmt.read_array_header_2_0
            shape, _, dtype = read(f)
        except EOFError:
            return "truncated .npy (ends inside its header)"
        except (ValueError, OSError) as e:
            return f"not a .npy file ({e})"
        expected = f.tell() + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size < expected:
        return f"truncated .npy ({size} of {expected} bytes)"
    return f"not a whole .npy ({size} bytes, its header says {expected})" if size > expected else ""


def move_aside(path):
    """Moves the damaged file `path` to `path`.damaged (.damaged.1, .2, ... when taken: an earlier damaged
    copy is never overwritten); returns the new path."""
    aside, n = path + ".damaged", 0
    while os.path.exists(aside):
        n += 1
        aside = f"{path}.damaged.{n}"
    os.rename(path, aside)
    return aside


class ResultsDir:
    def __init__(self, root, name, resume, force):
        self.dir = os.path.join(root, name)
        held = [n for n in os.listdir(self.dir) if not _is_lock_file(n)] if os.path.isdir(self.dir) else []
        if held:
            if force:  # retro-bench cleared it already; a direct call still keeps the lock files
                for n in held:
                    p = os.path.join(self.dir, n)
                    shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.remove(p)
            elif not resume:
                raise ResultsError(f"{self.dir} already holds results: pass --resume to continue it or --force "
                                   "to start over")
        os.makedirs(os.path.join(self.dir, "parts"), exist_ok=True)
        for dp, _, files in os.walk(self.dir):  # temporary leftovers of an interrupted session
            for f in files:
                if ".tmp-" in f and temp_writer_gone(f):
                    os.remove(os.path.join(dp, f))

    @classmethod
    def reader(cls, root, name):
        """The directory root/name as it is, for reading only (--shard-plan): nothing created or removed, no
        check that it exists (has_part is then False everywhere)."""
        self = cls.__new__(cls)
        self.dir = os.path.join(root, name)
        return self

    def part_path(self, run_id, case_id):
        return os.path.join(self.dir, "parts", run_id, case_id + ".json")

    def has_part(self, run_id, case_id):
        return os.path.exists(self.part_path(run_id, case_id))

    def write_part(self, run_id, case_id, obj):
        write_json(self.part_path(run_id, case_id), obj)

    def read_part(self, run_id, case_id):
        """The part, or ResultsError naming the file and what is wrong when it is damaged."""
        obj, damage = self._check_part(run_id, case_id)
        if damage:
            raise ResultsError(f"{self.part_path(run_id, case_id)}: damaged ({damage}); `retro-bench run CONFIG "
                               "--resume` moves it aside and recomputes it")
        return obj

    def _check_part(self, run_id, case_id):
        with open(self.part_path(run_id, case_id), "rb") as f:
            obj, damage = parse_part_text(f.read())
        return obj, damage or part_damage(obj, run_id, case_id)

    def reference_npy_path(self, case_id):
        """The reference's log-probabilities of a case, beside its part file."""
        return self.part_path(REFERENCE, case_id)[:-len(".json")] + ".npy"

    def set_aside_damaged(self, units, log):
        """Moves the damaged parts among `units` ((run_id, case_id) pairs: the session's own) aside,
        logging one line each, so that they are recomputed. A damaged reference part or log-probability
        file moves both aside: the reference is recomputed whole. Returns how many units were set aside."""
        moved = 0
        for run_id, case_id in units:
            path = self.part_path(run_id, case_id)
            if not os.path.exists(path):
                continue
            damage = self._check_part(run_id, case_id)[1]
            npy = self.reference_npy_path(case_id) if run_id == REFERENCE else None
            npy_bad = npy_damage(npy) if npy and os.path.exists(npy) else ""
            if not damage and not npy_bad:
                continue
            bad, why = (path, damage) if damage else (npy, npy_bad)
            also = [p for p in (path, npy) if p and p != bad and os.path.exists(p)]
            aside = move_aside(bad)
            for p in also:  # the rest of the reference, recomputed with it
                move_aside(p)
            log(f"warning: {bad}: damaged ({why}); moved to {aside}"
                + (f" (with {', '.join(os.path.basename(p) for p in also)})" if also else "")
                + ", its unit will be recomputed")
            moved += 1
        return moved

    def manifest_path(self):
        return os.path.join(self.dir, "manifest.json")

    @contextlib.contextmanager
    def _manifest_locked(self):
        """Exclusive use of manifest.json for one read-modify-write (the other shards wait milliseconds)."""
        fd = os.open(os.path.join(self.dir, MANIFEST_LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _on_disk(self):
        return read_json(self.manifest_path()) if os.path.exists(self.manifest_path()) else {}

    def start_session(self, config_source, resolved, command):
        # retro-bench's host_info() (git_revision, blas) when it started this run, for the report's header
        host = json.loads(os.environ.get("RETRO_HOST_JSON") or "{}")
        host.update(hostname=socket.gethostname(), machine=platform.machine(), cpus=os.cpu_count(),
                    python=platform.python_version())
        try:  # the model side's own library: the manifest says which torch ran the forward
            import torch
            host.setdefault("versions", {})["torch"] = torch.__version__
        except ImportError:
            pass
        mine = own_lock()
        start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        session = dict(start=start, command=command, status="running", host=socket.gethostname(), pid=os.getpid())
        if mine is not None:
            session["lock"] = mine["lock"]
        self._session_id = f"{start} {session['host']} {os.getpid()} {uuid.uuid4().hex[:8]}"
        session["id"] = self._session_id
        with self._manifest_locked():
            m = self._on_disk()
            for s in m.get("sessions", []):
                if isinstance(s, dict) and s.get("status") == "running" and session_gone(self.dir, s, mine):
                    s.update(status="stale", marked_stale_at=start)
                    who = f", PID {s['pid']} on {s.get('host', '?')}" if "pid" in s else ""
                    print(f"[closed-loop] note: an earlier session (started {s.get('start', '?')}{who}) ended without "
                          "finishing (killed?); marked stale", file=sys.stderr, flush=True)
            m.update(experiment="closed-loop", config=config_source, resolved=resolved, status="running", host=host)
            m.setdefault("sessions", []).append(session)
            write_json(self.manifest_path(), m)
        return m

    def save_manifest(self, m):
        """The manifest as it stands (the cases and the model once known: a sweep still running can be
        read by claims.py, plot and report): m's keys over the file's, the file's sessions with this
        session's entry taken from m (the other shards' entries as they wrote them)."""
        with self._manifest_locked():
            disk = self._on_disk()
            ours = next(s for s in m["sessions"] if s.get("id") == self._session_id)
            sessions = [ours if s.get("id") == self._session_id else s for s in disk.get("sessions", [])]
            if ours not in sessions:  # the file was replaced meanwhile (a --force elsewhere): ours alone
                sessions.append(ours)
            disk.update({k: v for k, v in m.items() if k != "sessions"})
            disk["sessions"] = m["sessions"] = sessions
            write_json(self.manifest_path(), disk)

    def end_session(self, m, status, **extra):
        m["status"] = status
        next(s for s in m["sessions"] if s.get("id") == self._session_id).update(
            end=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), status=status, **extra)
        self.save_manifest(m)
