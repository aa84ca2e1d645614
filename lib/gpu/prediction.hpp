#pragma once
// The cost model's prediction for what the CUDA backend measured (docs/cuda.md): the work the GPU did in
// one layer step (GpuStepWork, per sequence) as the cost model's LayerWork, timed by layer_time at the
// batch size on a hardware profile. The one place the two meet, shared by the runner and the
// RETRO_GPU_ONLY driver. JSON-free.
#include "gpu/backend.hpp"
#include "system/layer_time.hpp"

namespace retro {

/// LayerWork of one sequence: reads = attend + index bytes, FLOPs = group x reads (2 per fp16 element
/// per query head), host lookups at lookup_ns each (single-core microseconds).
LayerWork gpu_layer_work(const GpuStepWork& w, Overlap overlap, int group, double lookup_ns);

/// The modeled attention part (weights excluded) of the layer step for `batch` sequences.
LayerTime predict_gpu_step(const GpuStepWork& w, Overlap overlap, int group, double lookup_ns, int batch,
                           const HardwareSpec& hw);

/// The overlap the cost model assumes for a GPU method (wave; offloaded full: stream; full: serial).
Overlap gpu_overlap(GpuMethod m, bool offloaded);

}  // namespace retro
