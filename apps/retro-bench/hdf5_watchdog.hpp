#pragma once
// Ends the program with a clear error when HDF5 does not return from reading a trace file's metadata
// (HDF5 1.10 spins forever on some corrupt files; lib/trace/metadata_watch.hpp, docs/testing.md).
// RETRO_HDF5_TIMEOUT: the seconds a metadata read may take (default 60; 0 = no limit).
#include <condition_variable>
#include <mutex>
#include <thread>

namespace retro::cli {

class Hdf5Watchdog {
  public:
    /// Reads RETRO_HDF5_TIMEOUT (throws retro::ConfigError on a malformed value) and starts watching.
    Hdf5Watchdog();
    /// Stops watching (joins the thread).
    ~Hdf5Watchdog();
    Hdf5Watchdog(const Hdf5Watchdog&) = delete;
    Hdf5Watchdog& operator=(const Hdf5Watchdog&) = delete;

  private:
    void watch(double limit_s);
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace retro::cli
