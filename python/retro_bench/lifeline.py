"""Ending with the process that started us, and passing a results directory's lock on to our own
writers (lib/core/child_process.hpp's protocol; issue 43).

retro-bench starts the closed loop (and the closed loop starts dump_trace.py and retro-bench) with
$RETRO_PARENT_PID set to the starter's PID. `die_with_parent()` asks the kernel for SIGKILL when that
parent dies (prctl PR_SET_PDEATHSIG), however it dies (SIGKILL, the OOM killer), so no orphan carries
on writing into a results directory; a parent already gone means exiting at once. `run()` starts a child
the same way: it inherits the lock descriptors listed in $RETRO_LOCK_FDS (the results directory's flock,
so the lock stays held while any writer lives) and is told our PID."""

import ctypes
import errno
import os
import subprocess
import sys

PR_SET_PDEATHSIG = 1
SIGKILL = 9


def _prctl_pdeathsig():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux: nothing to ask
        return False


def alive(pid):
    """False for no such process and for a zombie (dead, not reaped yet: a parent killed by its own
    parent's death stays one until init reaps it, and os.kill(pid, 0) still succeeds on it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
        return s[s.rfind(")") + 2:][:1] not in ("Z", "X")
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except OSError as e:
        return e.errno != errno.ESRCH
    return True


def die_with_parent():
    """Call first thing: SIGKILL with the parent named by $RETRO_PARENT_PID (see the module's doc). A PID
    alive but not our parent (the variable passed through a shell) is left alone. Our own children are
    then told our PID."""
    v = os.environ.get("RETRO_PARENT_PID", "")
    if v.isdigit() and int(v) > 1:
        want = int(v)
        if os.getppid() == want:
            _prctl_pdeathsig()
            if os.getppid() != want:  # it died between the check and the request
                os._exit(137)
        elif not alive(want):  # orphaned before we could ask
            os._exit(137)
    os.environ["RETRO_PARENT_PID"] = str(os.getpid())


def lock_fds():
    """The results lock's descriptors we inherited ($RETRO_LOCK_FDS) that are open."""
    fds = []
    for s in os.environ.get("RETRO_LOCK_FDS", "").split(","):
        if s.isdigit():
            try:
                os.fstat(int(s))
                fds.append(int(s))
            except OSError:
                pass
    return fds


def run(cmd, **kw):
    """subprocess.run for a child that writes where we write: it holds our lock with us and ends with us
    (it must call die_with_parent(), as retro-bench and dump_trace.py do)."""
    env = dict(kw.pop("env", None) or os.environ)
    env["RETRO_PARENT_PID"] = str(os.getpid())
    fds = lock_fds()
    env["RETRO_LOCK_FDS"] = ",".join(map(str, fds))
    return subprocess.run(cmd, env=env, pass_fds=fds, **kw)


if __name__ == "__main__":  # pragma: no cover - a manual check: python3 lifeline.py
    die_with_parent()
    print(os.environ["RETRO_PARENT_PID"], lock_fds(), file=sys.stderr)
