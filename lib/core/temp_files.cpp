#include "core/temp_files.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>

namespace retro {

namespace fs = std::filesystem;

namespace {
constexpr const char* kTag = ".tmp-";

bool all_digits(const std::string& s) {
    if (s.empty()) return false;
    for (char c : s)
        if (c < '0' || c > '9') return false;
    return true;
}
}  // namespace

std::string this_host() {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "unknown";
    return buf;
}

std::string temp_path_for(const std::string& path) {
    static std::atomic<unsigned> counter{0};
    static const std::string host = this_host();
    return path + kTag + host + "-" + std::to_string((long)getpid()) + "-" + std::to_string(counter++);
}

std::optional<TempOwner> temp_file_owner(const std::string& name) {
    const std::string file = fs::path(name).filename().string();
    const size_t at = file.rfind(kTag);
    if (at == std::string::npos) return std::nullopt;
    const std::string rest = file.substr(at + std::string(kTag).size());
    // Split from the right: [host-]pid[-n]
    const size_t last = rest.rfind('-');
    TempOwner o;
    if (last == std::string::npos) {  // old "<pid>"
        if (!all_digits(rest)) return std::nullopt;
        o.host = this_host();
        o.pid = std::stol(rest);
        return o;
    }
    const std::string tail = rest.substr(last + 1), head = rest.substr(0, last);
    if (!all_digits(tail)) return std::nullopt;
    const size_t mid = head.rfind('-');
    if (mid == std::string::npos) {  // old "<pid>-<n>"
        if (!all_digits(head)) return std::nullopt;
        o.host = this_host();
        o.pid = std::stol(head);
        return o;
    }
    const std::string pid = head.substr(mid + 1);
    if (!all_digits(pid) || mid == 0) return std::nullopt;
    o.host = head.substr(0, mid);
    o.pid = std::stol(pid);
    return o;
}

bool temp_owner_gone(const TempOwner& owner) {
    if (owner.host != this_host() || owner.pid <= 0) return false;
    return ::kill((pid_t)owner.pid, 0) != 0 && errno == ESRCH;
}

bool temp_owner_is_me(const TempOwner& owner) {
    return owner.host == this_host() && owner.pid == (long)getpid();
}

int remove_orphan_temps_of(const std::string& path) {
    const fs::path p(path);
    const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
    const std::string prefix = p.filename().string() + kTag;
    std::error_code ec;
    int removed = 0;
    for (auto it = fs::directory_iterator(parent, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.rfind(prefix, 0) != 0) continue;
        const auto owner = temp_file_owner(name);
        std::error_code rec;
        if (owner && temp_owner_gone(*owner) && fs::remove(it->path(), rec)) ++removed;
    }
    return removed;
}

}  // namespace retro
