#pragma once
// One GPU measurement point (issue 41 #1: one measuring path): a layer job run through the backend under
// the one timing rule (issue 40 #1) — the first `warm_steps` selected steps run in full (selection,
// attention, cache admission: they fill the block cache) but are not timed, every later step is sampled
// (gpu/step_sample: its phase times, PCIe bytes, replica agreement and the cost model's prediction) and
// averaged. `retro-bench run` with "backend": "cuda" (lib/bench/cuda_runner) and retro_gpu_check's
// wave-vs-full rows (kernels/run/wave_vs_full) both measure through it. JSON-free (the RETRO_GPU_ONLY
// driver links it).
#include <functional>

#include "gpu/backend.hpp"
#include "gpu/gpu_methods.hpp"
#include "gpu/step_sample.hpp"

namespace retro {

struct GpuPointOptions {
    /// Selected steps run but left out of the timing (the cache warm-up); 0: every step is timed, from a
    /// cold cache.
    int warm_steps = 0;
    const HardwareSpec* hw = nullptr;  ///< the profile the prediction is for; none = no prediction
    double lookup_ns = 50;             ///< the host's mapping-table lookup per cluster (system "lookup_ns")
};

/// Every step of a point's run as the caller sees it: the step, and its sample when it is timed (nullptr
/// for a warm-up step).
using GpuPointStepFn = std::function<void(const GpuStep& step, const GpuStepSample* sample)>;

/// Runs `job` (its method's twin `m`) on `gpu`, calling on_step after every step; returns the means of
/// the timed steps' samples (GpuStepMeans::steps = the timed steps). Throws what run_layer throws
/// (GpuMemoryError when the batch does not fit: the caller records the point as skipped).
GpuStepMeans run_gpu_point(const GpuBackend& gpu, const GpuLayerJob& job, const GpuMethodInfo& m,
                           const GpuPointOptions& o, const GpuPointStepFn& on_step);

/// The selection of KV head h at step st: the GPU's own (m.gpu_selects) or, for a twin whose selection is
/// every visible token (full), `all` filled with [0, st.n).
const Selection& gpu_step_selection(const GpuStep& st, const GpuMethodInfo& m, size_t h, Selection& all);

}  // namespace retro
