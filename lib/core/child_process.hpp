#pragma once
// Running a child program that must not outlive this process (the closed loop's model process, the
// plotting scripts; issue 43): fork + exec with an argument vector (no shell), waiting for it.
//
// However this process ends, the child ends with it:
//   - SIGTERM / SIGHUP to this process while it waits are passed on to the child (a graceful stop: the
//     closed loop keeps its finished parts); SIGINT reaches the child through the process group.
//   - SIGKILL, the OOM killer, a crash — nothing can be passed on: the child is started with the parent-
//     death signal SIGKILL (prctl PR_SET_PDEATHSIG, set between fork and exec) and checks, after setting
//     it, that its parent is still this process (the race between fork and prctl). The signal follows
//     the *thread* that forked: spawn_wait forks from the thread that then waits for the child, so that
//     thread outlives it.
//   - The child's own children: it is told this process's PID in $RETRO_PARENT_PID; the project's
//     programs (retro-bench, closed_loop.py, dump_trace.py) set the same death signal on themselves when
//     their parent is that PID (die_with_parent_from_env; lifeline.py in Python) and pass it on likewise.
//
// Descriptors named in `inherit_fds` stay open in the child (their close-on-exec flag cleared there
// only): a results directory's flock is then held by the child too, so the lock is free only when no
// writer lives (ResultsLock::fds). They are listed in $RETRO_LOCK_FDS for the child to pass on to its
// own writers.
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace retro {

struct ChildOptions {
    /// NAME, value pairs replacing (or adding to) this process's environment.
    std::vector<std::pair<std::string, std::string>> env_set;
    /// What the program is, for errors ("Python interpreter"), and how to get it.
    std::string what = "program";
    std::string hint;
    /// Descriptors the child keeps (see above).
    std::vector<int> inherit_fds;
    /// Called with the child's PID once it has started (before waiting): e.g. recorded in a lock file.
    std::function<void(long pid)> on_started;
};

/// Runs args[0] (a path, or a name looked up on PATH) with `args` and waits. Returns the exit code
/// (128 + signal when killed). Throws Error naming opt.what and opt.hint when it cannot be started
/// (not found, not executable). SIGTERM/SIGHUP are forwarded while waiting (see above); a signal that
/// came before the child's PID was known is forwarded once it is.
int run_child(const std::vector<std::string>& args, const ChildOptions& opt);

/// For a program started by one that follows this protocol: when $RETRO_PARENT_PID names this process's
/// parent, asks the kernel for SIGKILL when the parent dies; when it names a process that is gone, the
/// parent died before the request took effect: exits at once (status 137, as if killed). A PID that is
/// alive but not the parent (the variable passed through a shell) is left alone. Call first in main().
void die_with_parent_from_env();

/// True when no live process has this PID on this host: none at all, or a zombie (dead, not reaped yet:
/// a process killed by its parent's death stays one until init reaps it, and kill(pid, 0) still succeeds
/// on it).
bool process_gone(long pid);

}  // namespace retro
