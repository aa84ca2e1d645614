#pragma once
// Run configurations (docs/config.md): which traces, which heads and steps, which methods with which
// parameter grids (expanded as a Cartesian product), which metrics and hardware profile. Parsing is
// strict: unknown keys, unknown methods and bad values are ConfigErrors before any work starts.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/backend_config.hpp"

namespace retro {

struct TraceSpec {
    std::string path;     ///< HDF5 trace; relative paths are relative to the working directory
    nlohmann::json synth;  ///< optional synth recipe (SynthParams JSON) used when `path` is absent
};

/// Decode steps evaluated: first, first+stride, ... (count of them; -1 = to the end of the trace).
struct StepSelection {
    int first = 0;
    int count = -1;
    int stride = 1;
    /// The selected step indices for a trace with `num_steps` decode steps (throws ConfigError when
    /// the selection does not fit).
    std::vector<int> resolve(int num_steps) const;
};

/// One point of a sweep: a method with fully resolved parameters.
struct MethodRun {
    std::string method;
    nlohmann::json params;  ///< every parameter, defaults filled in
    /// The resolved "system" point (GPU cache, cost model; lib/system/system_params.hpp), or null when
    /// the config has no "system" key (then the defaults apply and the run id is unchanged).
    nlohmann::json system;
    /// Backend "cuda": the batch of replicas this point runs (a sweep axis); 0 = backend "cpu".
    int batch = 0;
    /// Backend "cuda", method full: its kernel, "flashinfer" | "own" (cuda.full_kernel, a sweep axis);
    /// "" otherwise.
    std::string kernel;
    /// Backend "cuda", a method with a KV placement axis (wave): "gpu" for its KV in device memory
    /// (cuda.wave_kv); "" for pinned host memory (the default) and for every other method.
    std::string kv;
    /// "oracle_topk(k=100,gqa=per_head)"; cuda points end "@cuda(batch=8)", full's
    /// "@cuda(batch=8,kernel=flashinfer)", wave's in device memory "@cuda(batch=8,kv=gpu)"
    std::string label() const;
};

struct RunConfig {
    std::string name;  ///< results go to <results_root>/<name>/; [A-Za-z0-9._-]+
    std::string description;
    std::vector<TraceSpec> traces;
    std::vector<int> layers;    ///< empty = every layer in the trace
    std::vector<int> kv_heads;  ///< empty = every KV head
    StepSelection steps;
    std::vector<int> recall_k = {10, 100, 1000};
    std::string hardware = "a100-80gb-pcie4";  ///< hardware profile name (recorded; configs/hardware/)
    std::string kv_dtype = "trace";  ///< dtype for byte accounting: "trace" | float16 | bfloat16 | float32
    int threads = 0;                 ///< worker threads over heads; 0 = all cores
    std::string backend = "cpu";     ///< "cpu" | "cuda" (bench/backend_config.hpp, docs/cuda.md)
    CudaOptions cuda;                ///< the "cuda" section (backend "cuda" only)
    std::vector<MethodRun> runs;     ///< the expanded sweep (methods x "system" points)
    nlohmann::json system;           ///< the "system" section as given (null when absent)
    nlohmann::json throughput;       ///< resolved system.throughput (null = no throughput table)
    nlohmann::json source;           ///< the config as given

    /// The configuration with every default filled in and the sweep expanded (for manifests).
    nlohmann::json resolved() const;
};

/// Parses and validates a config. `origin` (a file name) prefixes every error message.
RunConfig parse_config(const nlohmann::json& j, const std::string& origin);

/// Reads and parses a JSON config file (syntax errors reported with the file name).
RunConfig load_config(const std::string& path);

}  // namespace retro
