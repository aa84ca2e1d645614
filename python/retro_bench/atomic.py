"""Atomic output, one helper for the whole package: a file is written under a temporary name in its own
directory and renamed into place, so a reader (or a resumed run) never sees half a file, and a failed or
interrupted writer leaves no temporary behind.

The temporary name is the C++ core's (lib/core/temp_files.hpp): "<path>.tmp-<host>-<pid>-<n>", so the
cleanup of either side (retro-bench's, closedloop.results's) recognizes it and spares a live writer's."""
import contextlib
import itertools
import os
import socket

from . import lifeline

_counter = itertools.count()


def temp_name(path):
    """A fresh temporary name beside `path` (same directory: the final rename is atomic), unique per host,
    process and call."""
    return f"{path}.tmp-{socket.gethostname()}-{os.getpid()}-{next(_counter)}"


def temp_writer_gone(name):
    """Whether the writer of a temporary file name (temp_name's "NAME.tmp-HOST-PID-N", or the older
    "NAME.tmp-PID") is certainly gone: it ran on this host and its process is dead (a zombie counts as
    gone). A live writer's file (another shard's) is kept; other hosts' are not judged."""
    tail = name.split(".tmp-", 1)[1].split(".")[0].split("-")
    if len(tail) >= 3 and tail[-2].isdigit():  # HOST-PID-N
        host, pid = "-".join(tail[:-2]), int(tail[-2])
        return host == socket.gethostname() and not lifeline.alive(pid)
    return tail[0].isdigit() and not lifeline.alive(int(tail[0]))


@contextlib.contextmanager
def atomic_path(path, fsync=False):
    """Yields a temporary path for the caller to write (by any means: open, h5py, torch.save); on a clean
    exit it becomes `path` (os.replace), on an exception it is removed. The directory is made if needed.
    fsync: flush the file to disk before the rename (figures, reports: files a reader opens at once)."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = temp_name(path)
    try:
        yield tmp
        if fsync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            with contextlib.suppress(OSError):
                os.remove(tmp)


def write_bytes(path, data, fsync=False, mode=None):
    """data (bytes) to `path`, atomically; mode: the file's permission bits (None: the umask's)."""
    with atomic_path(path, fsync=fsync) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
        if mode is not None:
            os.chmod(tmp, mode)


def write_text(path, text, fsync=False, newline=None):
    """text (str, UTF-8) to `path`, atomically; newline as open()'s ("" writes the text's own line ends)."""
    with atomic_path(path, fsync=fsync) as tmp:
        with open(tmp, "w", encoding="utf-8", newline=newline) as f:
            f.write(text)


def save_npy(path, arr):
    """A NumPy array to `path` (.npy), atomically (through a file object: np.save would append ".npy" to the
    temporary name)."""
    import numpy as np
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, arr)
