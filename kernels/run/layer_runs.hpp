#pragma once
// The layer runs of the CUDA backend (docs/cuda.md): full attention over all KV (GPU memory, or
// pinned host memory read over PCIe when offloaded), the wave decode path, Quest's, PQCache's and MagicPIG's
// (GPU hashing and static attention, the sampling and sampled attention on the host's cores) and the CPU-index
// methods' (the search and the retrieved tokens' attention on the host, the static pattern's on the GPU). Each calls only
// cuda_api.hpp, so they run against the CUDA kernels or against the CPU emulation (kernels/*/*_emulation.cpp).
#include <functional>
#include <string>

#include "gpu/backend.hpp"

namespace retro::gpu_run {

using StepFn = std::function<void(const GpuStep&)>;

void run_full_layer(const GpuLayerJob& job, const StepFn& on_step);
void run_wave_layer(const GpuLayerJob& job, const StepFn& on_step);
void run_quest_layer(const GpuLayerJob& job, const StepFn& on_step);
void run_pq_layer(const GpuLayerJob& job, const StepFn& on_step);
void run_magicpig_layer(const GpuLayerJob& job, const StepFn& on_step);
/// faiss_flat, faiss_ivf, faiss_hnsw, retrieval_attention: the CPU method's search and the retrieved
/// tokens' attention on the host's cores, the static pattern's attention on the GPU (host_index_layer.cpp).
void run_host_index_layer(const GpuLayerJob& job, const StepFn& on_step);

/// The layer run of each GPU method (gpu/gpu_methods.hpp), by name: what GpuBackend::run_layer calls.
/// A method gains its run path with one entry here (layer_runs.cpp); the registry test checks that
/// every GPU twin has one.
using LayerRun = void (*)(const GpuLayerJob& job, const StepFn& on_step);
/// The run for `method`, or nullptr when it has none.
LayerRun find_layer_run(const std::string& method);

/// The wave indexes of job's heads over the prompt, as run_wave_layer builds them (job.wave, its k-means
/// on the GPU or the CPU): to pass as job.built to several runs of the layer (batch points, placements).
BuiltIndex build_wave_heads(const GpuLayerJob& job);
/// pq's per-head cores of job's heads over the prompt (the CPU method's quantizer fit and codes, with
/// job.pq's seed), as run_pq_layer builds them: to pass as job.built likewise.
BuiltIndex build_pq_heads(const GpuLayerJob& job);

/// The CPU-index methods' instances (faiss_*, retrieval_attention) over the prompts of job's sequences, built as
/// run_host_index_layer builds them: to pass as job.built likewise (each run's replicas copy them).
BuiltIndex build_host_index_heads(const GpuLayerJob& job);

/// The index build of each method with GpuMethodInfo::shared_build, by name (layer_runs.cpp); nullptr for
/// another.
using IndexBuild = BuiltIndex (*)(const GpuLayerJob& job);
IndexBuild find_index_build(const std::string& method);

}  // namespace retro::gpu_run
