#pragma once
// The out-of-distribution recall experiment (RetrievalAttention Fig. 3a / 6) as the CLI runs it, shared
// by `retro-bench ood-recall TRACE [options]` and `retro-bench run CONFIG` when the config says
// "experiment": "ood-recall" (configs/paper/ood-recall.json; docs/config.md, docs/methods/faiss.md).
#include <nlohmann/json.hpp>
#include <string>

namespace retro::cli {

/// One `ood-recall` invocation: a trace, one index kind with its build settings and the search settings
/// replayed (comma-separated lists, as on the command line).
struct OodArgs {
    std::string trace;
    std::string index = "ivf";
    std::string mips = "ip";
    int nlist = 512;
    std::string nprobe = "1,2,4,8,16,32,64,128,256,512";
    int m = 32;
    int ef_construction = 40;
    std::string ef = "16,32,64,128,256,512,1024";
    int k = 100;
    int key_queries = 256;
    unsigned seed = 1;
    std::string layers, kv_heads;  ///< comma-separated; empty = all
    int threads = 0;
    std::string json_out;  ///< also write the curves here (empty: print only)
};

/// Runs one invocation: prints the table, writes `json_out` when set. Throws ConfigError/TraceError.
int run_ood(const OodArgs& a);

/// True when a config JSON asks for the ood-recall experiment ("experiment": "ood-recall").
bool is_ood_recall_config(const nlohmann::json& j);

struct OodConfigRun {
    std::string results_root = "results";
    bool resume = false, force = false;
    int threads = -1;  ///< overrides the config when >= 0
    bool validate_only = false;  ///< check keys and traces (absent ones must have a synth recipe), print, run nothing
};

/// `retro-bench run CONFIG` for an ood-recall config: for every trace (generated from its "synth" recipe
/// when absent) and every entry of "indexes", one `run_ood` writing
/// <results_root>/<name>/ood-recall-<index>[-<mips>]-<trace stem>.json (what `retro-bench plot` draws as
/// the `ood_recall` figure). --resume skips files already written; an existing directory needs --resume
/// or --force. Keys are checked strictly (ConfigError naming the file and key). Returns the exit code.
/// With `validate_only` (`retro-bench validate`) it stops after the checks and prints what would run.
int run_ood_config(const nlohmann::json& j, const std::string& origin, const OodConfigRun& opt);

}  // namespace retro::cli
