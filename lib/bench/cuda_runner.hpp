#pragma once
// `retro-bench run` with "backend": "cuda" (docs/cuda.md): the runner's checks and its unit of work, one
// (trace, layer) at a time on the GPU backend (lib/gpu/backend.hpp). Every metric is computed here by the
// harness's evaluator from the GPU's outputs and selections, exactly as for the CPU backend; the GPU
// phase times, PCIe bytes and the cost model's prediction for the same work are added per step.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/results.hpp"
#include "bench/runner.hpp"
#include "gpu/backend.hpp"
#include "metrics/metrics.hpp"
#include "system/hardware.hpp"
#include "trace/reader.hpp"

namespace retro {

/// Throws ConfigError naming the backend when `gpu` is null (this build has no CUDA) or cannot run
/// (its status(), e.g. "no CUDA device"). Called before anything else happens.
void check_cuda_backend(const GpuBackend* gpu);

/// Throws ConfigError naming the trace when its shape is outside the kernels' limits or its KV is not
/// stored as float16 for the GPU (kv_dtype "trace" on a non-float16 trace).
void check_cuda_trace(const PreparedTrace& t, const RunConfig& cfg, const GpuBackend& gpu);

/// One layer of one trace with the runs (indices into cfg.runs) that miss a part there.
struct CudaLayerJob {
    size_t trace = 0;
    int layer = 0;
    std::vector<size_t> runs;
};

/// What a failed run's entry in `skipped` says after its label ("label: failed: why"): the runner counts
/// these (a failure, unlike a batch that does not fit, makes the run's exit status nonzero).
inline constexpr const char* kFailedRun = "failed: ";

/// Runs `job` on `gpu` and writes one part per (run, selected KV head). A run whose batch does not fit
/// in memory ("label: does not fit: why") or that fails ("label: failed: why") writes nothing and enters
/// `skipped` (run index -> that text); runs already there are not tried again. Throws Error when a failure
/// left the device unusable.
void run_cuda_layer(const RunConfig& cfg, const PreparedTrace& tr, const TraceReader& reader,
                    const CudaLayerJob& job, const std::vector<std::string>& run_ids,
                    const std::vector<MetricInfo>& reg, const ResultsDir& rd, const HardwareProfile& hw,
                    const GpuBackend& gpu, std::map<size_t, std::string>& skipped);

/// The "cuda" block of a run record: device, batch and, per phase, the measured mean, the modeled mean
/// and their ratio (from the record's aggregated metrics).
nlohmann::json cuda_record_summary(const nlohmann::json& metrics, int batch, const std::string& device);

}  // namespace retro
