#pragma once
// Runs a RunConfig: for every trace x (layer, KV head) - in parallel over heads - builds every pending
// method instance, replays the decode steps (append, select) and evaluates each selection against exact
// attention computed once per step and shared by all methods. Results are written per (run, head) as
// they finish, so an interrupted sweep resumes where it stopped (docs/results.md).
#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/config.hpp"
#include "bench/shard.hpp"
#include "gpu/backend.hpp"
#include "trace/trace.hpp"

namespace retro {

/// A trace checked against the config: its metadata and the selected layers, KV heads and steps.
struct PreparedTrace {
    TraceSpec spec;
    TraceInfo info;
    std::vector<int> layers, kv_heads, steps;
    std::string trace_id;  ///< identity used in run ids: path + source + shape
    /// Content fingerprint (trace/fingerprint.hpp), stamped on every result part and the manifest; set
    /// by prepare_traces for every file that exists (sampled reads: cheap), empty for one still to generate.
    std::string fingerprint;
    bool needs_synth = false;  ///< file absent (or stale), will be generated from spec.synth
    bool stale = false;        ///< the file exists but was generated from other synth parameters
    /// For listings: "", " (absent: ...)" or " (stale: ...)".
    std::string generation_note() const {
        if (!needs_synth) return "";
        return stale ? " (stale: made from other synth parameters; will be regenerated)"
                     : " (absent: will be generated from its synth recipe)";
    }
};

/// Checks every trace of the config (opening each: metadata validation) and resolves the selection.
/// Missing traces with a synth recipe are generated when `generate_missing`, else reported via
/// needs_synth (with `info` filled from the recipe's shape). A synthetic file whose recorded parameters
/// differ from the recipe (an edited recipe, a changed preset) is stale and regenerated the same way.
/// A trace listed twice (also under two spellings of one file) is an error. Throws ConfigError/
/// TraceError, and Interrupted when `stop` is set during a generation (checked between layers; no file
/// is left).
std::vector<PreparedTrace> prepare_traces(const RunConfig& cfg, bool generate_missing,
                                          const std::function<void(const std::string&)>& note = {},
                                          const std::atomic<bool>* stop = nullptr);

/// The id of one run (trace x method x params x metric options x steps): "<method>-<12 hex>".
std::string run_id_for(const PreparedTrace& t, const MethodRun& r, const RunConfig& cfg);

struct RunProgress {
    int done = 0;     ///< heads finished this session
    int total = 0;    ///< heads to run this session (excluding those resumed from disk)
    int skipped = 0;  ///< heads already complete on disk
    double elapsed_s = 0;
    double eta_s = -1;  ///< -1 until estimable
};

struct RunnerOptions {
    std::string results_root = "results";
    bool resume = false;  ///< continue an existing results directory, skipping finished (run, head)s
    bool force = false;   ///< delete an existing results directory first
    /// Run only this shard's units (lib/bench/shard.hpp); its sessions go to shards/shard-I-of-N.json
    /// instead of manifest.json, and the shard that completes the sweep merges (lib/bench/merge.hpp).
    ShardSpec shard;
    /// Wait for a run holding the results directory's lock to finish instead of refusing to start
    /// (bench/results_lock.hpp).
    bool wait_lock = false;
    int threads = -1;     ///< overrides the config when >= 0 (0 = all cores)
    std::string max_memory;  ///< memory limit for the check before work ("8G"); empty = available memory
    std::string command_line;  ///< recorded in the manifest
    std::string config_path;   ///< recorded in the manifest
    std::function<void(const RunProgress&)> on_progress;
    std::function<void(const std::string&)> on_note;
    const std::atomic<bool>* stop = nullptr;  ///< set asynchronously (SIGINT) to stop after current heads
    /// The GPU backend for configs with "backend": "cuda" (kernels/run: make_cuda_backend); null when
    /// this program was built without CUDA (such a config then fails before any work, saying so).
    const GpuBackend* gpu = nullptr;
};

struct RunOutcome {
    std::string dir;                     ///< results directory
    std::vector<nlohmann::json> records;  ///< complete run records of this config, in config order
    bool interrupted = false;
    int heads_run = 0, heads_skipped = 0;
    bool merged = false;  ///< a shard that completed the sweep and merged it
    /// Backend "cuda": the runs that failed this session ("label: failed: why"; listed in the manifest session's
    /// "skipped" with the batches that did not fit): their points are missing, --resume tries them again.
    std::vector<std::string> failed;
};

RunOutcome run_config(const RunConfig& cfg, const RunnerOptions& opt);

}  // namespace retro
