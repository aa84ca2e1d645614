#pragma once
// Memory checks before work (issue 16): a command estimates the bytes it will hold at its peak and
// refuses up front, naming the estimate, the limit and what to change, instead of being OOM-killed
// half-way or failing with std::bad_alloc.
#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace retro {

/// A command would need more memory than the machine (or --max-memory) offers; raised before any work
/// starts, with the estimate, the limit and what to change.
class ResourceError : public Error {
  public:
    using Error::Error;
};

/// The bytes a command will hold at its peak, and how that figure was made.
struct MemoryEstimate {
    double bytes = 0;    ///< estimated peak bytes
    std::string what;    ///< "run 'x': 4 heads in flight x 1.2 GiB per head (...)"
    std::string advice;  ///< what to change to need less: "use fewer threads (--threads 1), ..."
};

/// The memory limit a command checks its estimate against.
struct MemoryLimit {
    double bytes = 0;    ///< 0 = unknown (no check)
    std::string source;  ///< "--max-memory 8G" | "MemAvailable in /proc/meminfo" | ...
};

/// Bytes available to new allocations: MemAvailable from /proc/meminfo, lowered to the cgroup's
/// remaining memory.max when one is set. 0 when neither can be read.
double available_memory_bytes();

/// `max_memory` ("8G", "512M", "1.5GiB", "4096" bytes; k/M/G/T are powers of 1024) when given, else the
/// environment's RETRO_MAX_MEMORY (same syntax; batch jobs, the fuzz targets), else the available memory.
/// Throws ConfigError on a malformed size.
MemoryLimit memory_limit(const std::string& max_memory);

/// Parses a byte size as above; `what` names the option in the error.
double parse_byte_size(const std::string& s, const std::string& what);

/// "1.5 GiB", "12.0 MiB", "512 B".
std::string format_bytes(double bytes);

/// Throws ResourceError when the estimate exceeds the limit: "<what> needs about X, more than the
/// limit Y (<source>); <advice>". Does nothing when the limit is unknown.
void check_memory(const MemoryEstimate& need, const MemoryLimit& limit);

}  // namespace retro
