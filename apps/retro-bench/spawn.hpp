#pragma once
// Finding the project's Python package (retro_bench: plotting, report, the closed loop) from the CLI, in
// the build tree, a wheel or the source tree; core/child_process.hpp runs its modules (they end when
// retro-bench ends).
#include <string>
#include <vector>

namespace retro::cli {

/// The retro_bench package directory (the one holding __init__.py and _launch.py):
/// $RETRO_PYTHON_PACKAGE when set; else `<exe>/python/retro_bench` (the build tree: build/python, the
/// compiled core beside links to the source files); else `<exe>/..` (a wheel: the binary is
/// retro_bench/bin/retro-bench); else the source tree this binary was built from (pure Python only: no
/// compiled core). Throws Error naming every place looked at.
std::string python_package_dir();

/// The argument vector that runs `module` (e.g. "retro_bench.plotting") of the package found by
/// python_package_dir() with interpreter `python`: `python -B <package>/_launch.py module`. The launcher
/// imports the package from its own directory, so no PYTHONPATH is set and nothing of the interpreter's
/// own environment (a venv's site-packages) is shadowed.
std::vector<std::string> python_module_command(const std::string& python, const std::string& module);

/// The directory of the running executable ("" when /proc/self/exe cannot be read).
std::string exe_dir();

}  // namespace retro::cli
