#include "hdf5_watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "trace/metadata_watch.hpp"

namespace retro::cli {

namespace {

constexpr double kDefaultLimitS = 60;

/// RETRO_HDF5_TIMEOUT in seconds (unset: the default; 0: no limit).
double limit_from_env() {
    const char* v = std::getenv("RETRO_HDF5_TIMEOUT");
    if (!v || !*v) return kDefaultLimitS;
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    if (*end != '\0' || !std::isfinite(s) || s < 0)
        throw ConfigError(std::string("RETRO_HDF5_TIMEOUT='") + v +
                          "': expected the seconds a trace file's metadata read may take (0 = no limit)");
    return s;
}

}  // namespace

Hdf5Watchdog::Hdf5Watchdog() {
    const double limit_s = limit_from_env();
    if (limit_s > 0) thread_ = std::thread([this, limit_s] { watch(limit_s); });
}

Hdf5Watchdog::~Hdf5Watchdog() {
    if (!thread_.joinable()) return;
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void Hdf5Watchdog::watch(double limit_s) {
    // Poll a few times per limit (at most every 0.5 s): an idle check costs one uncontended mutex.
    const auto period = std::chrono::duration<double>(std::clamp(limit_s / 4, 0.05, 0.5));
    std::unique_lock<std::mutex> lk(mu_);
    while (!cv_.wait_for(lk, period, [this] { return stop_; })) {
        const auto read = longest_metadata_read();
        if (!read || read->seconds < limit_s) continue;
        // The reading thread is stuck inside HDF5 (holding its lock): it cannot be unwound, only ended.
        std::fflush(stdout);
        std::fprintf(stderr,
                     "retro-bench: error: %s: HDF5 did not return within %g s reading its metadata (corrupt "
                     "file?); RETRO_HDF5_TIMEOUT sets the limit in seconds\n",
                     read->path.c_str(), limit_s);
        std::fflush(stderr);
        std::_Exit(2);
    }
}

}  // namespace retro::cli
