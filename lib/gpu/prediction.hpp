#pragma once
// The cost model's prediction for what the CUDA backend measured (docs/cuda.md): the work the GPU did in
// one layer step (GpuStepWork, per sequence) as the cost model's LayerWork, timed by layer_time at the
// batch size on a hardware profile. The one place the two meet, shared by the runner and the
// RETRO_GPU_ONLY driver. JSON-free.
#include <utility>
#include <vector>

#include "gpu/backend.hpp"
#include "system/layer_time.hpp"

namespace retro {

/// LayerWork of one sequence: reads = attend + index bytes, FLOPs = group x reads (2 per fp16 element
/// per query head), host lookups at lookup_ns each (single-core microseconds).
LayerWork gpu_layer_work(const GpuStepWork& w, Overlap overlap, int group, double lookup_ns);

/// The modeled attention part (weights excluded) of the layer step for `batch` sequences.
LayerTime predict_gpu_step(const GpuStepWork& w, Overlap overlap, int group, double lookup_ns, int batch,
                           const HardwareSpec& hw);

/// One GPU phase as a device runs it: a fixed latency (kernel launches and drains, single-block work that
/// does not grow with the data) plus its bytes at the rate the phase attains — an empirical roofline with
/// a latency term, fitted to the phase's measured times (the pure roofline above has neither: it was
/// 3-57x under the wave step on the H200).
struct PhaseFit {
    double latency_us = 0;
    double bytes_per_us = 0;  ///< 0: not fitted
    bool fitted() const { return bytes_per_us > 0; }
    double predict_us(double bytes) const { return latency_us + bytes / bytes_per_us; }
    /// Least squares of us = latency + bytes / rate over (bytes, us) points. Not fitted (rate 0) with fewer
    /// than two distinct byte counts or no positive slope; a negative latency is refitted through the
    /// origin (latency 0).
    static PhaseFit fit(const std::vector<std::pair<double, double>>& points);
};

}  // namespace retro
