#pragma once
// A run's resolved parameters as the fields of a GPU layer job (gpu/gpu_methods.hpp, issue 41 #2): one
// binding per GPU method, by name (full: offloaded; wave: the index and zone parameters; quest: budget,
// page size, GQA, dense layers; pq: the
// quantizer, budget, layout and GQA with the CPU method's build seed; magicpig: the hashing
// and layout with its build seed). What the
// runner and the config checks use to build the job; the GPU twin then checks it.
#include "bench/config.hpp"
#include "gpu/backend.hpp"

namespace retro {

/// The job of `r` on the cuda backend without its heads, steps and batch: the method's name and fields,
/// the config's cuda options (k-means on the GPU, warm-up, launch gate, full's kernel). Throws
/// ConfigError naming `where` when the method has no GPU twin, a parameter is not at the value the GPU
/// path requires (GpuMethodInfo::required_params), or the job asks what the GPU path does not do (the
/// twin's check).
GpuLayerJob gpu_job_for(const MethodRun& r, const CudaOptions& o, const std::string& where);

/// The job's GPU block cache for a trace of `head_dim`, `prompt_len`: r.system's cache per KV head (as the
/// system model's HeadSystem sizes it: head_cache_params), its block tokens and its transfer unit
/// (system.token_block); then the GPU twin's check again, which may look at them (pq with its KV in host
/// memory needs whole blocks per unit). ConfigError naming `where` on a refused point.
void set_job_cache(const MethodRun& r, int head_dim, int prompt_len, GpuLayerJob& job, const std::string& where);

}  // namespace retro
