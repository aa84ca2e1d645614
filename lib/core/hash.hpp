#pragma once
// FNV-1a 64-bit: stable across platforms and runs, used to key results by their parameters.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace retro {

inline uint64_t fnv1a64(std::string_view s, uint64_t h = 1469598103934665603ull) {
    for (unsigned char c : s) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return h;
}

/// The first `digits` hex digits of fnv1a64(s).
inline std::string short_hash(std::string_view s, int digits = 12) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)fnv1a64(s));
    return std::string(buf, (size_t)digits);
}

}  // namespace retro
