#pragma once
// Finding the project's Python scripts from the CLI (plot, report, closed-loop runs) in the source tree or
// next to the executable; core/child_process.hpp runs them (they end when retro-bench ends).
#include <string>

namespace retro::cli {

/// A script of the source tree by its relative path (e.g. "scripts/plotting/retro_plot.py"):
/// $`env_var` when set, else the source tree this binary was built from, else next to the executable
/// (`<exe>/../<rel>`, `<exe>/../share/retro-bench/<installed_rel>` when installed_rel is not empty).
/// Throws Error naming every place looked at.
std::string find_script(const std::string& rel, const char* env_var, const std::string& installed_rel = "");

/// The directory of the running executable ("" when /proc/self/exe cannot be read).
std::string exe_dir();

}  // namespace retro::cli
