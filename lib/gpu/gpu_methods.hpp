#pragma once
// The GPU method registry (issue 41 #2): the methods the cuda backend runs, each a GPU twin of a method
// of the CPU registry (methods/params.hpp) under the same name, as FAISS mirrors its CPU indexes with GPU
// ones. The runner (lib/bench/cuda_runner) and the drivers look a run's method up here — no enum, no
// name comparisons; the backend (kernels/run/cuda_backend.cpp) holds the layer runner registered for each
// name, and lib/bench/gpu_job_params.cpp turns a run's resolved parameters into the job's fields.
// Adding a method to the GPU: an entry here (gpu_methods.cpp), a layer runner in kernels/run, a params
// binding in lib/bench/gpu_job_params.cpp (docs/cuda.md, "A method on the GPU"). JSON-free: the
// RETRO_GPU_ONLY driver uses it too.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gpu/backend.hpp"
#include "system/layer_time.hpp"

namespace retro {

struct GpuMethodInfo {
    std::string name;     ///< the CPU twin's registry name (the run's "name" in a config)
    std::string summary;  ///< one line: what the GPU does for it
    /// The GPU reports the method's selection per step (GpuStep::selections, footprints); false: the CPU
    /// twin runs beside the GPU to give it (full: every visible token, the method's own selection).
    bool gpu_selects = false;
    /// An index built once per (layer, parameters) and shared by the layer's runs at other batch sizes and
    /// placements (GpuBackend::build_index -> GpuLayerJob::built): wave, pq, the CPU-index methods.
    bool shared_build = false;
    /// Its full-attention kernel is a sweep axis (cuda.full_kernel: FlashInfer, cuDNN, the own kernel).
    bool kernel_axis = false;
    /// Its step can run as one CUDA graph (GpuLayerJob::step_graph; cuda.step_graph): full, wave.
    bool step_graph = false;
    /// Its KV placement is a sweep axis (cuda.wave_kv: pinned host memory or device memory): wave, pq.
    bool kv_axis = false;
    /// cuda.device_gather (the host's lookups or the cache's table on the GPU) applies to it, and its records
    /// say which it ran: wave. (cuda.async_update applies to every method with kv_axis.)
    bool lookup_axis = false;
    /// String parameters of the CPU twin the GPU path takes only at one value, (name, value): quest's
    /// placement "gpu" (the KV in device memory, as Quest's code keeps it). gpu_job_for refuses another
    /// value by name before any work.
    std::vector<std::pair<std::string, std::string>> required_params;
    /// How the cost model overlaps the job's phases (system/layer_time.hpp).
    std::function<Overlap(const GpuLayerJob& job)> overlap;
    /// Throws ParamError when the job asks what the GPU path does not do (beyond the CPU twin's checks).
    std::function<void(const GpuLayerJob& job)> check;
};

/// Every GPU method, in display order.
const std::vector<GpuMethodInfo>& gpu_method_registry();

/// The GPU twin of `name`, or nullptr when the method has none.
const GpuMethodInfo* find_gpu_method(const std::string& name);

/// "full, wave": the names, for messages.
std::string gpu_method_names();

/// Throws ParamError when the job asks what m's GPU path does not do: the capabilities every twin declares
/// (step_graph), then m.check. The one check of a job, at config time (gpu_job_for) and at run time
/// (check_job).
void check_gpu_job(const GpuMethodInfo& m, const GpuLayerJob& job);

}  // namespace retro
