// Finding and running the project's Python scripts (spawn.hpp).
#include "spawn.hpp"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "core/host.hpp"

extern char** environ;

namespace retro::cli {

namespace fs = std::filesystem;

namespace {

// The script being waited for (0: none) and a stop signal that came before its PID was known. Both are
// lock-free atomics (async-signal-safe): a process-directed signal may run the handler on any of this
// process's threads, not only the one in spawn_wait.
std::atomic<pid_t> g_child{0};
std::atomic<int> g_pending{0};
static_assert(std::atomic<pid_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

// SIGTERM / SIGHUP to this process while it waits: passed on to the script, which stops as after Ctrl-C
// (the closed loop keeps its finished parts and says how to resume); this process then reports the
// script's exit. Without it a `kill` of retro-bench (a shell's job control, a wrapper's timeout) ended
// retro-bench alone and left the script running on, orphaned, still writing to the results directory.
// SIGINT is not passed on: Ctrl-C reaches the script itself (same process group); one from kill(1)
// alone to this process is ignored until the script ends.
// A signal between the spawn and g_child's store is kept in g_pending: the handler stores it before it
// reads g_child, spawn_wait stores g_child before it takes g_pending (sequentially consistent), so at
// least one of them sees the other, and the exchange lets exactly one of them forward it.
extern "C" void forward_to_child(int sig) {
    if (sig == SIGINT) return;
    g_pending.store(sig);
    const pid_t child = g_child.load();
    if (child > 0 && g_pending.exchange(0) != 0) kill(child, sig);
}

bool is_file(const std::string& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec);
}
}  // namespace

std::string exe_dir() {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    return ec ? std::string() : exe.parent_path().string();
}

std::string find_script(const std::string& rel, const char* env_var, const std::string& installed_rel) {
    if (const char* e = std::getenv(env_var); e && *e) {
        if (!is_file(e)) throw Error(std::string(env_var) + "=" + e + ": no such file");
        return e;
    }
    std::vector<std::string> tried = {std::string(source_dir()) + "/" + rel};
    if (const std::string d = exe_dir(); !d.empty()) {
        tried.push_back((fs::path(d) / ".." / rel).lexically_normal().string());
        if (!installed_rel.empty())
            tried.push_back((fs::path(d) / "../share/retro-bench" / installed_rel).lexically_normal().string());
    }
    std::string list;
    for (const auto& p : tried) {
        if (is_file(p)) return p;
        list += (list.empty() ? "" : ", ") + p;
    }
    throw Error("cannot find the script " + fs::path(rel).filename().string() + " (looked at " + list + "); set " +
                env_var + " to its path");
}

int spawn_wait(const std::vector<std::string>& args_in, const std::vector<std::pair<std::string, std::string>>& env_set,
               const std::string& what, const std::string& hint) {
    std::vector<std::string> args = args_in;
    const std::string& exe = args.at(0);
    const bool has_slash = exe.find('/') != std::string::npos;
    if (has_slash && access(exe.c_str(), X_OK) != 0)
        throw Error(what + " " + exe + " is not executable (" + std::strerror(errno) + "): " + hint);
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
        const std::string kv = *e;
        bool replaced = false;
        for (const auto& [k, v] : env_set) replaced = replaced || kv.rfind(k + "=", 0) == 0;
        if (!replaced) env.push_back(kv);
    }
    for (const auto& [k, v] : env_set) env.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);

    // The forwarder is in place before the script starts (installing it only after posix_spawn left a
    // window — the script already running, its PID already written — in which a SIGHUP killed retro-bench
    // alone); a signal that comes before the script's PID is known waits in g_pending. The script starts
    // with this thread's mask and its signals at their defaults (exec resets handled signals; glibc's
    // posix_spawn resets them in the child before exec too), except those ignored here.
    g_pending.store(0);
    const int sigs[3] = {SIGTERM, SIGHUP, SIGINT};
    struct sigaction fwd {}, old[3];
    fwd.sa_handler = forward_to_child;
    sigemptyset(&fwd.sa_mask);
    bool set[3] = {false, false, false};
    for (int i = 0; i < 3; ++i) {  // a signal ignored here (nohup's SIGHUP, a background job's SIGINT) stays so
        sigaction(sigs[i], nullptr, &old[i]);
        if (old[i].sa_handler != SIG_IGN) set[i] = sigaction(sigs[i], &fwd, nullptr) == 0;
    }
    const auto restore = [&] {
        g_child.store(0);  // first: the script is reaped, its PID may be reused
        for (int i = 0; i < 3; ++i)
            if (set[i]) sigaction(sigs[i], &old[i], nullptr);
    };
    pid_t pid = 0;
    const int rc = has_slash ? posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data())
                             : posix_spawnp(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data());
    if (rc != 0) {
        restore();
        if (const int sig = g_pending.exchange(0); sig != 0) raise(sig);  // at its old disposition
        throw Error("cannot run " + what + " " + exe + ": " + std::strerror(rc) + " (" + hint + ")");
    }
    // Wait for the script and report its status; stop signals meanwhile go to it (forward_to_child).
    g_child.store(pid);
    if (const int sig = g_pending.exchange(0); sig != 0) kill(pid, sig);
    int status = 0;
    int waited;
    while ((waited = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    const int wait_errno = errno;
    restore();
    if (waited < 0) throw Error(std::string("waitpid: ") + std::strerror(wait_errno));
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 3;
}

}  // namespace retro::cli
