// Finding the project's Python package (spawn.hpp).
#include "spawn.hpp"

#include <cstdlib>
#include <filesystem>

#include "core/error.hpp"
#include "core/host.hpp"

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

std::string python_package_dir() {
    const auto is_package = [](const fs::path& d) {
        return is_file((d / "__init__.py").string()) && is_file((d / "_launch.py").string());
    };
    if (const char* e = std::getenv("RETRO_PYTHON_PACKAGE"); e && *e) {
        if (!is_package(e))
            throw Error(std::string("RETRO_PYTHON_PACKAGE=") + e +
                        ": not the retro_bench package (no __init__.py and _launch.py there)");
        return e;
    }
    std::vector<fs::path> tried;
    if (const std::string d = exe_dir(); !d.empty()) {
        tried.push_back(fs::path(d) / "python" / "retro_bench");
        tried.push_back((fs::path(d) / "..").lexically_normal());
    }
    tried.push_back(fs::path(source_dir()) / "python" / "retro_bench");
    std::string list;
    for (const auto& p : tried) {
        if (is_package(p)) return p.string();
        list += (list.empty() ? "" : ", ") + p.string();
    }
    throw Error("cannot find the retro_bench Python package (looked at " + list +
                "); set RETRO_PYTHON_PACKAGE to its directory");
}

std::vector<std::string> python_module_command(const std::string& python, const std::string& module) {
    return {python, "-B", (fs::path(python_package_dir()) / "_launch.py").string(), module};
}

}  // namespace retro::cli
