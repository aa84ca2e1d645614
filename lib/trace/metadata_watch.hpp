#pragma once
// Which trace file's HDF5 metadata is being read right now, and for how long: what a watchdog in the
// program (apps/retro-bench/hdf5_watchdog.cpp) needs to end a process that HDF5 never returns to.
//
// Why: HDF5 1.10 can spin forever on a corrupt file (a variable-length string attribute whose global
// heap is damaged: H5Aread -> H5T__conv_vlen -> H5HG_read, found by fuzzing; docs/testing.md). A call
// into HDF5 cannot be interrupted and the library never exits, so the reader only records what it is
// doing; the program decides when to give up. The same corrupt heap can make HDF5 crash (SIGSEGV in
// H5HG_read) instead: for that, a program's fatal-signal handler asks metadata_read_on_this_thread()
// whether the faulting thread was reading a trace's metadata, and which (apps/retro-bench/
// hdf5_crash_guard.cpp).
#include <optional>
#include <string>

namespace retro {

/// A metadata read in progress: the trace file and the seconds since it began.
struct MetadataRead {
    std::string path;
    double seconds = 0;
};

/// The longest-running metadata read in progress, or nullopt when none is. Thread-safe.
std::optional<MetadataRead> longest_metadata_read();

/// The trace file whose metadata the calling thread is reading (a NUL-terminated copy of its path,
/// truncated to kMaxWatchedPathBytes - 1 bytes), or nullptr when it is reading none. Async-signal-safe
/// (no lock, no allocation: each MetadataReadScope copies its path beforehand into a fixed static slot
/// tagged with its thread's id), so a SIGSEGV handler may call it. A thread reading while all
/// kMaxWatchedReads slots are taken is not seen here (the watchdog's registry still sees it).
const char* metadata_read_on_this_thread() noexcept;
inline constexpr int kMaxWatchedReads = 8;
inline constexpr int kMaxWatchedPathBytes = 4096;

/// Marks a metadata read of `path` (TraceReader's open: root attributes and dataset headers) for its
/// lifetime. Begin it once the HDF5 lock is held, so waiting for another thread's read does not count.
class MetadataReadScope {
  public:
    explicit MetadataReadScope(const std::string& path);
    ~MetadataReadScope();
    MetadataReadScope(const MetadataReadScope&) = delete;
    MetadataReadScope& operator=(const MetadataReadScope&) = delete;

  private:
    unsigned long long id_;
    int slot_ = -1;  ///< index of this read's signal-safe slot, or -1 when none was free
};

}  // namespace retro
