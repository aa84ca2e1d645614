#pragma once
// Running the project's Python scripts from the CLI (plot, report, closed-loop runs): finding a script
// in the source tree or next to the executable, and running an interpreter on it by posix_spawn with an
// argument vector (no shell), waiting for it.
#include <string>
#include <utility>
#include <vector>

namespace retro::cli {

/// A script of the source tree by its relative path (e.g. "scripts/plotting/retro_plot.py"):
/// $`env_var` when set, else the source tree this binary was built from, else next to the executable
/// (`<exe>/../<rel>`, `<exe>/../share/retro-bench/<installed_rel>` when installed_rel is not empty).
/// Throws Error naming every place looked at.
std::string find_script(const std::string& rel, const char* env_var, const std::string& installed_rel = "");

/// The directory of the running executable ("" when /proc/self/exe cannot be read).
std::string exe_dir();

/// Runs argv[0] (a path, or a name looked up on PATH) with `args`, the environment plus `env_set`
/// (NAME, value pairs replacing existing values), and waits. Returns the exit code (128 + signal when
/// killed). While it waits, SIGTERM and SIGHUP are passed on to the script and SIGINT is left to reach it
/// through the process group: this process outlives the script, never the other way round. `what` names
/// the interpreter in errors ("Python interpreter", ...); `hint` says how to get it.
int spawn_wait(const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env_set,
               const std::string& what, const std::string& hint);

}  // namespace retro::cli
