// Finding and running the project's Python scripts (spawn.hpp).
#include "spawn.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

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

    pid_t pid = 0;
    const int rc = has_slash ? posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data())
                             : posix_spawnp(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data());
    if (rc != 0) throw Error("cannot run " + what + " " + exe + ": " + std::strerror(rc) + " (" + hint + ")");
    // Ctrl-C reaches the child too (same process group); wait for it to finish and report its status.
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) throw Error(std::string("waitpid: ") + std::strerror(errno));
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 3;
}

}  // namespace retro::cli
