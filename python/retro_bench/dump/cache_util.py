"""Concurrency-safe caches (issue 27 #6): every cache the project's Python writes under
${XDG_CACHE_HOME:-~/.cache}/retro-bench/ (exported checkpoints, joined GGUF files) tolerates any number of
concurrent first users. One process builds while holding an exclusive lock on a file beside the target
(`<target>.lock`, fcntl.flock: released by the kernel when the process dies, so a killed builder never
blocks the next one); the others wait on the lock and then use the finished result. A result is written
under a temporary name in the same directory and renamed into place, so it is either complete or absent;
a process that finds the target already there discards its own copy instead of overwriting it.

Standard library only (Debian's python3 and the dump venv both import it)."""

import contextlib
import fcntl
import os
import shutil
import sys
import time



def cache_root():
    """${XDG_CACHE_HOME:-~/.cache}/retro-bench"""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "retro-bench")


@contextlib.contextmanager
def locked(target, what=None, log=None):
    """Holds an exclusive flock on `<target>.lock` (created if needed; never removed: removing a lock file
    another process waits on would let a third one lock a different inode). `what` names the target in
    the waiting message."""
    os.makedirs(os.path.dirname(os.path.abspath(target)) or ".", exist_ok=True)
    fd = os.open(f"{target}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            t0 = time.time()
            (log or _log)(f"waiting for {what or target}: another process is building it")
            fcntl.flock(fd, fcntl.LOCK_EX)
            (log or _log)(f"{what or target}: the other process finished ({time.time() - t0:.0f} s)")
        yield
    finally:
        os.close(fd)  # releases the lock


def _log(msg):
    print(f"[cache] {msg}", file=sys.stderr, flush=True)


def is_complete_dir(path, marker):
    """A published directory: it exists and holds its marker file (written last before the rename)."""
    return os.path.isfile(os.path.join(path, marker))


def publish(tmp, target):
    """Renames `tmp` (a file or a directory) onto `target` unless `target` already exists, in which case
    `tmp` is discarded (another process published the same result first). An empty directory at `target`
    (what `--export-hf` accepts) is replaced. Returns True when `tmp` became `target`."""
    if os.path.isdir(target) and not os.listdir(target):
        with contextlib.suppress(OSError):
            os.rmdir(target)
    if not os.path.lexists(target):
        try:
            if os.path.isdir(tmp):
                os.rename(tmp, target)  # fails (ENOTEMPTY/EEXIST) if a directory appeared meanwhile
            else:
                os.link(tmp, target)  # fails (EEXIST) if a file appeared meanwhile: never overwrites
                os.remove(tmp)
            return True
        except FileExistsError:
            pass
        except OSError as e:
            if not os.path.isdir(target):
                raise
            if e.errno not in (39, 17):  # ENOTEMPTY, EEXIST
                raise
    discard(tmp)
    return False


def discard(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        with contextlib.suppress(OSError):
            os.remove(path)
