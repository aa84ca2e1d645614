// Running a child program that ends with this process (child_process.hpp).
#include "core/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.hpp"

extern char** environ;

namespace retro {

namespace {

// The child being waited for (0: none) and a stop signal that came before its PID was known. Both are
// lock-free atomics (async-signal-safe): a process-directed signal may run the handler on any of this
// process's threads, not only the one in run_child.
std::atomic<pid_t> g_child{0};
std::atomic<int> g_pending{0};
static_assert(std::atomic<pid_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

// SIGTERM / SIGHUP to this process while it waits: passed on to the child, which stops as after Ctrl-C
// (the closed loop keeps its finished parts and says how to resume); this process then reports the
// child's exit. SIGINT is not passed on: Ctrl-C reaches the child itself (same process group); one from
// kill(1) alone to this process is ignored until the child ends.
// A signal between the fork and g_child's store is kept in g_pending: the handler stores it before it
// reads g_child, run_child stores g_child before it takes g_pending (sequentially consistent), so at
// least one of them sees the other, and the exchange lets exactly one of them forward it.
extern "C" void forward_to_child(int sig) {
    if (sig == SIGINT) return;
    g_pending.store(sig);
    const pid_t child = g_child.load();
    if (child > 0 && g_pending.exchange(0) != 0) kill(child, sig);
}

bool executable(const std::string& p) { return access(p.c_str(), X_OK) == 0; }

/// args[0] as a path: itself when it has a slash, else the first executable of that name on $PATH
/// ("" when there is none).
std::string resolve(const std::string& exe) {
    if (exe.find('/') != std::string::npos) return exe;
    const char* path = std::getenv("PATH");
    std::string dirs = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
    size_t from = 0;
    while (from <= dirs.size()) {
        const size_t to = std::min(dirs.find(':', from), dirs.size());
        const std::string dir = to > from ? dirs.substr(from, to - from) : ".";
        if (const std::string p = dir + "/" + exe; executable(p)) return p;
        from = to + 1;
    }
    return "";
}

std::vector<std::string> child_environment(const ChildOptions& opt) {
    auto set = opt.env_set;
    set.emplace_back("RETRO_PARENT_PID", std::to_string((long)getpid()));
    std::string fds;
    for (int fd : opt.inherit_fds) fds += (fds.empty() ? "" : ",") + std::to_string(fd);
    set.emplace_back("RETRO_LOCK_FDS", fds);
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
        const std::string kv = *e;
        bool replaced = false;
        for (const auto& [k, v] : set) replaced = replaced || kv.rfind(k + "=", 0) == 0;
        if (!replaced) env.push_back(kv);
    }
    for (const auto& [k, v] : set)
        if (!v.empty()) env.push_back(k + "=" + v);
    return env;
}

/// The child between fork and exec: async-signal-safe calls only (this process may have other threads).
[[noreturn]] void exec_child(const char* path, char* const* argv, char* const* envp, pid_t parent,
                             const std::vector<int>& inherit, const int* handled, int n_handled,
                             const sigset_t& mask, int err_fd) {
    for (int i = 0; i < n_handled; ++i) signal(handled[i], SIG_DFL);  // exec would reset them anyway
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(137);  // the parent died before the request: as if killed with it
    for (int fd : inherit) fcntl(fd, F_SETFD, 0);
    pthread_sigmask(SIG_SETMASK, &mask, nullptr);
    execve(path, argv, envp);
    const int e = errno;
    [[maybe_unused]] const ssize_t w = write(err_fd, &e, sizeof e);
    _exit(127);
}

}  // namespace

int run_child(const std::vector<std::string>& args_in, const ChildOptions& opt) {
    std::vector<std::string> args = args_in;
    const std::string& exe = args.at(0);
    const std::string path = resolve(exe);
    if (path.empty()) throw Error("cannot run " + opt.what + " " + exe + ": not found on PATH (" + opt.hint + ")");
    if (!executable(path))
        throw Error(opt.what + " " + exe + " is not executable (" + std::strerror(errno) + "): " + opt.hint);
    std::vector<std::string> env = child_environment(opt);
    std::vector<char*> argv, envp;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    int err_pipe[2];
    if (pipe2(err_pipe, O_CLOEXEC) != 0) throw Error(std::string("cannot run ") + opt.what + ": pipe: " + std::strerror(errno));

    // The forwarder is in place before the child starts; a signal that comes before the child's PID is
    // known waits in g_pending. Signals are blocked across fork so that none runs the forwarder inside
    // the child before exec (it would be lost there); the child resets them and restores the mask.
    g_pending.store(0);
    const int sigs[3] = {SIGTERM, SIGHUP, SIGINT};
    struct sigaction fwd {}, old[3];
    fwd.sa_handler = forward_to_child;
    sigemptyset(&fwd.sa_mask);
    bool set[3] = {false, false, false};
    int handled[3], n_handled = 0;
    for (int i = 0; i < 3; ++i) {  // a signal ignored here (nohup's SIGHUP, a background job's SIGINT) stays so
        sigaction(sigs[i], nullptr, &old[i]);
        if (old[i].sa_handler != SIG_IGN && sigaction(sigs[i], &fwd, nullptr) == 0) {
            set[i] = true;
            handled[n_handled++] = sigs[i];
        }
    }
    const auto restore = [&] {
        g_child.store(0);  // first: the child is reaped, its PID may be reused
        for (int i = 0; i < 3; ++i)
            if (set[i]) sigaction(sigs[i], &old[i], nullptr);
    };
    sigset_t all, mask;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &mask);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0)
        exec_child(path.c_str(), argv.data(), envp.data(), parent, opt.inherit_fds, handled, n_handled, mask,
                   err_pipe[1]);
    const int fork_errno = errno;
    if (pid > 0) g_child.store(pid);
    pthread_sigmask(SIG_SETMASK, &mask, nullptr);
    close(err_pipe[1]);
    if (pid < 0) {
        close(err_pipe[0]);
        restore();
        if (const int sig = g_pending.exchange(0); sig != 0) raise(sig);  // at its old disposition
        throw Error("cannot run " + opt.what + " " + exe + ": fork: " + std::strerror(fork_errno));
    }
    if (const int sig = g_pending.exchange(0); sig != 0) kill(pid, sig);
    // exec's outcome: the pipe closes on a successful exec (close-on-exec), or carries its errno
    int exec_errno = 0;
    ssize_t got;
    while ((got = read(err_pipe[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
    }
    close(err_pipe[0]);
    if (got <= 0) exec_errno = 0;
    if (exec_errno == 0 && opt.on_started) opt.on_started((long)pid);
    int status = 0;
    int waited;
    while ((waited = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    const int wait_errno = errno;
    restore();
    if (exec_errno != 0)
        throw Error("cannot run " + opt.what + " " + exe + ": " + std::strerror(exec_errno) + " (" + opt.hint + ")");
    if (waited < 0) throw Error(std::string("waitpid: ") + std::strerror(wait_errno));
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 3;
}

bool process_gone(long pid) {
    std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
    if (!f) return kill((pid_t)pid, 0) != 0 && errno == ESRCH;  // no /proc: what kill(2) can tell
    char buf[512];
    const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    const char* close = std::strrchr(buf, ')');  // the state follows the command name, which may hold ')'
    return close && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X');
}

void die_with_parent_from_env() {
    const char* v = std::getenv("RETRO_PARENT_PID");
    if (!v || !*v) return;
    char* end = nullptr;
    const long want = std::strtol(v, &end, 10);
    if (*end != '\0' || want <= 1) return;
    if ((long)getppid() == want) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if ((long)getppid() != want) _exit(137);  // it died between the check and the request
    } else if (process_gone(want)) {
        _exit(137);  // the parent that started us is gone: we were orphaned before we could ask
    }
}

}  // namespace retro
