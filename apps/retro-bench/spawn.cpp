// Finding the project's Python scripts (spawn.hpp).
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

}  // namespace retro::cli
