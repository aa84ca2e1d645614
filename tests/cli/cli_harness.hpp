#pragma once
// Driving the built retro-bench (RETRO_BIN) from a test: run a shell command and capture its output and
// exit code, start one in the background to signal it, read result files. Each fixture runs in a fresh
// temporary directory (CliDir) that is removed afterwards.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace retro::test {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Result {
    int code;         ///< exit code, or 128 + signal
    std::string out;  ///< stdout and stderr together
};

/// The binary under test: RETRO_BIN, or $RETRO_TEST_BIN (to run a suite against another build, e.g. to
/// show that a test fails before its fix).
inline std::string bin() {
    const char* other = std::getenv("RETRO_TEST_BIN");
    return other && *other ? other : RETRO_BIN;
}

/// Runs `cmd` with sh in the current directory; stdout and stderr captured together.
inline Result sh(const std::string& cmd) {
    std::string full = "cd '" + fs::current_path().string() + "' && " + cmd + " 2>&1";
    FILE* p = popen(full.c_str(), "r");
    std::string out;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    int st = pclose(p);
    return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

inline std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

inline std::vector<json> read_jsonl(const fs::path& p) {
    std::vector<json> v;
    std::ifstream in(p);
    std::string line;
    while (std::getline(in, line))
        if (!line.empty()) v.push_back(json::parse(line));
    return v;
}

/// A retro-bench process started in the background (its output goes to `log`); wait() reaps it.
struct Child {
    pid_t pid = -1;
    /// Starts RETRO_BIN with `args`, stdout+stderr to the file `log`.
    static Child start(const std::vector<std::string>& args, const std::string& log) {
        Child c;
        c.pid = fork();
        if (c.pid == 0) {
            const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            dup2(fd, 1);
            dup2(fd, 2);
            const std::string exe = bin();
            std::vector<char*> argv;
            argv.push_back(const_cast<char*>(exe.c_str()));
            for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
            argv.push_back(nullptr);
            execv(exe.c_str(), argv.data());
            _exit(127);
        }
        return c;
    }
    /// The exit code, or 128 + the signal that ended it.
    int wait() {
        int st = 0;
        waitpid(pid, &st, 0);
        pid = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    ~Child() {
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
        }
    }
};

/// Polls `cond` every 10 ms for up to `seconds`; true when it held.
template <class F>
bool wait_for(F cond, double seconds = 60) {
    for (int i = 0; i < (int)(seconds * 100); ++i) {
        if (cond()) return true;
        usleep(10000);
    }
    return cond();
}

/// Test fixture: a fresh temporary working directory per test.
class CliDir : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/retro_cli_XXXXXX";
        dir_ = mkdtemp(tmpl);
        old_ = fs::current_path();
        fs::current_path(dir_);
    }
    void TearDown() override {
        fs::current_path(old_);
        fs::remove_all(dir_);
    }
    void write_config(const std::string& path, const json& j) { std::ofstream(path) << j.dump(2); }
    // A tiny SmolLM2-shaped trace (9 q / 3 kv heads, d=64): 2 layers, `prompt` tokens, `steps` steps.
    void make_trace(const std::string& path, int prompt = 600, int steps = 6, int seed = 3) {
        auto r = sh(bin() + " synth " + path + " --preset smollm2 --layers 2 --prompt-len " + std::to_string(prompt) +
                    " --steps " + std::to_string(steps) + " --prefill-queries 16 --seed " + std::to_string(seed));
        ASSERT_EQ(r.code, 0) << r.out;
        ASSERT_TRUE(fs::exists(path));
    }
    fs::path dir_, old_;
};

}  // namespace retro::test
