#pragma once
// One measured GPU layer step, as every driver records it (issue 41 #1: one measuring path): the phase
// times the backend measured, the PCIe bytes, how far the batch's replicas disagree, and the cost model's
// prediction for the same work on a hardware profile. `retro-bench run` (lib/bench/cuda_runner) stores
// the samples per step in its part files; retro_gpu_check's wave-vs-full run (kernels/run/wave_vs_full)
// averages them per row. JSON-free (the RETRO_GPU_ONLY driver links it).
#include <cstddef>

#include "gpu/backend.hpp"
#include "gpu/gpu_methods.hpp"
#include "system/hardware_spec.hpp"
#include "system/layer_time.hpp"

namespace retro {

/// What sampling a step needs besides the step: its job and method, and the hardware to model.
struct GpuStepContext {
    const GpuLayerJob* job = nullptr;
    const GpuMethodInfo* method = nullptr;
    const HardwareSpec* hw = nullptr;  ///< nullptr: no prediction (GpuStepSample::modeled false)
    double lookup_ns = 50;             ///< the host's mapping-table lookup, per cluster (system "lookup_ns")
};

struct GpuStepSample {
    GpuStepTimes times;          ///< measured on the method's stream (backend.hpp)
    double batch_h2d_bytes = 0;  ///< over PCIe for all B sequences
    double batch_d2h_bytes = 0;
    double replica_diff = 0;     ///< largest relative L2 distance of a replica's outputs from replica 0's
    bool modeled = false;
    LayerTime model;             ///< the cost model for the same work at the job's batch (when modeled)
};

/// The sample of `st` (a step of c.job's run).
GpuStepSample sample_gpu_step(const GpuStep& st, const GpuStepContext& c);

/// Means over a run's steps of what its samples hold (retro_gpu_check's rows).
struct GpuStepMeans {
    int steps = 0;
    GpuStepTimes times;  ///< each phase's mean (gate_timed_out: whether any step's gate timed out)
    int gate_timeouts = 0;
    double batch_h2d_bytes = 0, replica_diff_max = 0;
    LayerTime model;  ///< select_us, h2d_us, attend_us, attention_us: means
    void add(const GpuStepSample& s);
    /// The means (sums / steps); call once, after the last add.
    void finish();
};

}  // namespace retro
