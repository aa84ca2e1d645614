"""Result files of a closed-loop experiment (docs/results.md, "closed-loop experiment"):

  parts/<run_id>/<case_id>.json   one (run, case): per-position fidelity samples or the greedy tokens,
                                  selection statistics, build and per-step times; the unit of --resume
                                  (parts/reference/<case_id>.npy: the reference's log-probabilities)
  prefill/<case_id>.pt            the prompt's prefill state (KV cache, prefill queries), for resuming
  runs.jsonl                      one aggregated record per run (reference first), config order
  cases.csv                       one row per (run, case)
  manifest.json                   status, config as given, resolved runs, cases, host, sessions

Every file is written to a temporary name and renamed into place."""

import json
import os
import platform
import shutil
import socket
import time


def write_atomic(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def save_npy_atomic(path, arr):
    import numpy as np
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:  # a file object: np.save would append ".npy" to a name
            np.save(f, arr)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json(path, obj):
    write_atomic(path, json.dumps(obj, indent=1) + "\n")


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class ResultsError(Exception):
    pass


def _is_lock_file(name):
    """retro-bench's lock files (lib/bench/results_lock.hpp): held by retro-bench and inherited by this
    process, never deleted (a second run would lock a new file beside the held one)."""
    return name == ".lock" or name.startswith(".lock-shard-")


def _pid_gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _temp_writer_gone(name):
    """A temporary file ("NAME.tmp-PID", or core/temp_files.hpp's "NAME.tmp-HOST-PID-N") whose writer on
    this host is gone: a leftover of an interrupted session. A live writer's (another shard's) is kept."""
    tail = name.split(".tmp-", 1)[1].split(".")[0].split("-")
    if len(tail) >= 3 and tail[-2].isdigit():  # HOST-PID-N
        host, pid = "-".join(tail[:-2]), int(tail[-2])
        return host == socket.gethostname() and _pid_gone(pid)
    return tail[0].isdigit() and _pid_gone(int(tail[0]))


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
                if ".tmp-" in f and _temp_writer_gone(f):
                    os.remove(os.path.join(dp, f))

    def part_path(self, run_id, case_id):
        return os.path.join(self.dir, "parts", run_id, case_id + ".json")

    def has_part(self, run_id, case_id):
        return os.path.exists(self.part_path(run_id, case_id))

    def write_part(self, run_id, case_id, obj):
        write_json(self.part_path(run_id, case_id), obj)

    def read_part(self, run_id, case_id):
        return read_json(self.part_path(run_id, case_id))

    def manifest_path(self):
        return os.path.join(self.dir, "manifest.json")

    def start_session(self, config_source, resolved, command):
        m = read_json(self.manifest_path()) if os.path.exists(self.manifest_path()) else {}
        # retro-bench's host_info() (git_revision, blas) when it started this run, for the report's header
        host = json.loads(os.environ.get("RETRO_HOST_JSON") or "{}")
        host.update(hostname=socket.gethostname(), machine=platform.machine(), cpus=os.cpu_count(),
                    python=platform.python_version())
        m.update(experiment="closed-loop", config=config_source, resolved=resolved, status="running", host=host)
        m.setdefault("sessions", []).append(dict(start=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                                 command=command, status="running"))
        write_json(self.manifest_path(), m)
        return m

    def save_manifest(self, m):
        """The manifest as it stands (the cases and the model once known: a sweep still running can be
        read by claims.py, plot and report)."""
        write_json(self.manifest_path(), m)

    def end_session(self, m, status, **extra):
        m["status"] = status
        m["sessions"][-1].update(end=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), status=status, **extra)
        write_json(self.manifest_path(), m)
