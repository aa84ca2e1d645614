#include "core/memory.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "core/error.hpp"

namespace retro {

namespace {
/// The number in a one-line file such as /sys/fs/cgroup/memory.max ("max" or unreadable: -1).
double read_number_file(const char* path) {
    std::ifstream in(path);
    std::string s;
    if (!(in >> s) || s.empty() || !std::isdigit((unsigned char)s[0])) return -1;
    return std::strtod(s.c_str(), nullptr);
}
}  // namespace

double available_memory_bytes() {
    double avail = 0;
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    double value = 0;
    while (in >> key >> value) {
        std::getline(in, unit);
        if (key == "MemAvailable:") {
            avail = value * 1024.0;  // reported in kB
            break;
        }
    }
    // A cgroup v2 limit (containers, Slurm jobs) is what the OOM killer enforces.
    const double max = read_number_file("/sys/fs/cgroup/memory.max");
    const double cur = read_number_file("/sys/fs/cgroup/memory.current");
    if (max > 0 && cur >= 0) {
        const double left = std::max(0.0, max - cur);
        avail = avail > 0 ? std::min(avail, left) : left;
    }
    return avail;
}

double parse_byte_size(const std::string& s, const std::string& what) {
    const auto bad = [&] {
        return ConfigError(what + " '" + s + "': expected a size such as 8G, 512M, 1.5GiB or a byte count");
    };
    size_t pos = 0;
    double v = 0;
    try {
        v = std::stod(s, &pos);
    } catch (const std::exception&) {
        throw bad();
    }
    std::string unit = s.substr(pos);
    unit.erase(std::remove_if(unit.begin(), unit.end(), [](unsigned char c) { return std::isspace(c); }),
               unit.end());
    for (auto& c : unit) c = (char)std::toupper((unsigned char)c);
    if (unit.size() >= 2 && unit.back() == 'B') unit.pop_back();  // "GB", "GIB" -> "G", "GI"
    if (unit.size() == 2 && unit[1] == 'I') unit.pop_back();
    double mult = 1;
    if (unit.empty() || unit == "B") mult = 1;
    else if (unit == "K") mult = 1024.0;
    else if (unit == "M") mult = 1024.0 * 1024;
    else if (unit == "G") mult = 1024.0 * 1024 * 1024;
    else if (unit == "T") mult = 1024.0 * 1024 * 1024 * 1024;
    else throw bad();
    if (!std::isfinite(v) || v <= 0) throw bad();
    return v * mult;
}

MemoryLimit memory_limit(const std::string& max_memory) {
    if (!max_memory.empty()) return {parse_byte_size(max_memory, "--max-memory"), "--max-memory " + max_memory};
    if (const char* env = std::getenv("RETRO_MAX_MEMORY"); env && *env)
        return {parse_byte_size(env, "RETRO_MAX_MEMORY"), std::string("RETRO_MAX_MEMORY=") + env};
    return {available_memory_bytes(), "available memory: MemAvailable in /proc/meminfo or the cgroup's memory.max"};
}

std::string format_bytes(double b) {
    char buf[64];
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (b >= 1024.0 && u < 5) {
        b /= 1024.0;
        ++u;
    }
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
    return buf;
}

void check_memory(const MemoryEstimate& need, const MemoryLimit& limit) {
    if (limit.bytes <= 0 || need.bytes <= limit.bytes) return;
    throw ResourceError(need.what + " needs about " + format_bytes(need.bytes) + " of memory, more than the " +
                        format_bytes(limit.bytes) + " limit (" + limit.source + "); " + need.advice);
}

}  // namespace retro
