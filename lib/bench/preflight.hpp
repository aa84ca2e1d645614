#pragma once
// The checks `run` makes before any work, shared with `validate` (one code path, issue 16): the
// hardware profile, every method point against every trace's shape (MethodInfo::check_trace), and the
// memory the run will hold, estimated from the trace shapes, the methods and the heads in flight.
#include <vector>

#include "bench/config.hpp"
#include "bench/runner.hpp"
#include "core/memory.hpp"
#include "system/hardware.hpp"

namespace retro {

struct PreflightOptions {
    int threads = -1;        ///< the command line's --threads (-1 = the config's)
    std::string max_memory;  ///< the command line's --max-memory ("8G"); empty = the available memory
};

/// Everything `run` checks before any work, given the traces as prepare_traces(cfg, false) sees them
/// (absent synthetic traces described by their recipe): loads the hardware profile; checks every
/// (trace, method point) pair as the method's build would; estimates the memory of generating each
/// absent trace and of the run itself and refuses it above the limit. Throws ConfigError (profile),
/// ParamError naming the trace, the run and the parameter, or ResourceError with the estimate, the limit
/// and what to change.
struct Preflight {
    HardwareProfile hardware;
    MemoryEstimate memory;  ///< the run's (the largest trace generation's when that is larger)
    MemoryLimit limit;
};
Preflight check_before_work(const RunConfig& cfg, const std::vector<PreparedTrace>& traces,
                            const PreflightOptions& opt = {});

/// Worker threads a CPU run uses: `threads` (>= 0 from the command line) over cfg.threads, 0 = every
/// core, at most one per job (`jobs` = (trace, layer, KV head) heads to run).
int run_threads(const RunConfig& cfg, int threads, size_t jobs);

/// Peak memory of running `cfg` on `traces` with `threads` heads in flight (CPU backend; the CUDA
/// backend holds one layer's heads): per head, its slice (TraceReader::read_head), the exact reference
/// of its GQA group and every method instance's index (MethodInfo::index_bytes); the largest head of
/// any trace times the heads in flight.
MemoryEstimate estimate_run_memory(const RunConfig& cfg, const std::vector<PreparedTrace>& traces, int threads);

}  // namespace retro
