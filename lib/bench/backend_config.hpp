#pragma once
// The "backend" and "cuda" keys of a run config (docs/config.md): where `retro-bench run` computes the
// attention. "cpu" (default): every method, per KV head, on the CPU. "cuda": the methods full and wave on
// the GPU (docs/cuda.md), every KV head of a layer batched, for each batch size of "cuda.batch".
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace retro {

struct MethodRun;

/// The "cuda" section (only with "backend": "cuda").
struct CudaOptions {
    std::vector<int> batch = {1};  ///< replicas of the trace's request, a sweep axis (1..4096)
    std::string kmeans = "cpu";    ///< wave index k-means: cpu (lib/cluster, as the CPU method) | gpu
    int warmup = 1;                ///< untimed runs of the first selected step's kernels (0..100)
    /// the first warm_steps selected steps per layer and batch run in full (they fill the block cache)
    /// but are left out of the GPU times (gpu/point_run.hpp: the one timing rule); their accuracy counts
    int warm_steps = 0;
    /// full attention's kernels, a sweep axis of the method full: "flashinfer" (the field's library, the
    /// baseline) | "cudnn" (cuDNN's fused attention, PyTorch's SDPA on Hopper) | "own" (the project's
    /// flash-decoding kernel, the readable reference)
    std::vector<std::string> full_kernel = {"flashinfer"};
    /// each timed step's launches queued behind a launch gate before the GPU runs it (GpuLayerJob::
    /// launch_gate): the GPU's time, not the host's launch calls; false: the calls inside the timing
    bool launch_gate = true;
    /// the step as one CUDA graph (GpuLayerJob::step_graph): full and wave (its device path without the
    /// asynchronous update); refused for the other methods by name
    bool step_graph = false;
    /// where a method with a KV placement axis (GpuMethodInfo::kv_axis: wave) keeps the clustered KV, a
    /// sweep axis: "host" (pinned host memory, misses over PCIe: the paper's offloaded setting) | "gpu"
    /// (device memory: the within-GPU-memory setting, misses are device copies)
    std::vector<std::string> wave_kv = {"host"};
    /// the execution buffers assembled on the device from the ranked ids (true; with wave_kv "host" through
    /// the GPU block cache's table on the device) or by the host's cache lookups and copy lists (false: the
    /// paper's host path, measured beside)
    bool device_gather = true;
    /// wave, KV in host memory, device_gather: the GPU block cache's update of a step applied at the next
    /// step while the GPU ranks and estimates (GpuLayerJob::async_update), not after the attention
    bool async_update = false;
    /// wave's host lookup workers (0: min(8, cores - 1); 1: the caller alone)
    int host_threads = 0;
    /// batches of this many distinct sequences (issue 40 #1): replica b runs sequence b % sequences, sequence q
    /// being the trace's layer l + q (mod its layers: the same KV heads of another layer stand in for another
    /// request; the harness evaluates sequence 0, layer l itself); 1: every replica a copy of layer l. Every GPU
    /// twin takes it
    int sequences = 1;

    /// Strict parse: unknown keys and bad values are ConfigErrors naming `where` and the key.
    static CudaOptions from_json(const nlohmann::json& j, const std::string& where);
    nlohmann::json to_json() const;
};

/// "cpu" or "cuda"; anything else is a ConfigError naming the key and the allowed values.
std::string parse_backend(const nlohmann::json& v, const std::string& where);

/// Throws ConfigError (prefixed by `where`) when the cuda backend cannot run this point: a method other
/// than full and wave, wave with a GQA ranking other than sum or (k-means on the GPU) a seed, or the
/// Belady cache policy (the GPU cache runs online).
void check_cuda_run(const MethodRun& r, const CudaOptions& o, const std::string& where);

}  // namespace retro
