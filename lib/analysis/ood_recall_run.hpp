#pragma once
// The out-of-distribution recall experiment over a trace (RetrievalAttention Fig. 3a / 6): the per-head
// measurement of analysis/ood_recall.hpp for every selected head, the mean over heads, and the scanned
// fraction at which each curve reaches a recall. Driven by `retro-bench ood-recall TRACE [options]` and
// by ood-recall configs (analysis/ood_recall_config.hpp); docs/methods/faiss.md.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/head_selection.hpp"
#include "analysis/ood_recall.hpp"

namespace retro {

/// One ood-recall invocation: a trace, one index kind with its build settings and the search settings
/// replayed (comma-separated lists, as on the command line and in the JSON the experiment writes).
struct OodRecallArgs {
    std::string trace;
    std::string index = "ivf";  ///< flat | ivf | hnsw
    std::string mips = "ip";    ///< ip | l2_transform
    int nlist = 512;
    std::string nprobe = "1,2,4,8,16,32,64,128,256,512";
    int m = 32;
    int ef_construction = 40;
    std::string ef = "16,32,64,128,256,512,1024";
    int k = 100;
    int key_queries = 256;
    unsigned seed = 1;
    std::string layers, kv_heads;  ///< comma-separated; empty = all
    int threads = 0;               ///< OpenMP threads over heads (0 = all)
};

/// The scanned fraction at which the mean curves reach `target` recall (NaN: never).
struct OodRecallReach {
    double target = 0;
    double decode = 0, keys = 0;
};

struct OodRecallReport {
    OodRecallArgs args;
    OodRecallParams params;         ///< as parsed from args
    int prompt_len = 0;
    HeadSelection heads;
    std::vector<HeadRef> head_refs;        ///< the order of per_head
    std::vector<OodRecallResult> per_head;
    std::vector<OodRecallPoint> mean;      ///< one per setting: the mean over heads
    std::vector<OodRecallReach> reach;     ///< targets 0.80, 0.90, 0.95
    double build_ms = 0;                   ///< mean over heads
};

/// Smallest scanned fraction at which a curve reaches `target` recall, interpolating linearly between
/// settings; NaN when it never does. scanned, recall: [settings].
double scanned_at(const std::vector<double>& scanned, const std::vector<double>& recall, double target);

/// Checks `a` (ConfigError naming the option), opens the trace, measures every selected head.
OodRecallReport run_ood_recall(const OodRecallArgs& a);

/// The JSON document `retro-bench ood-recall --json` writes (what `retro-bench plot` draws as
/// `ood_recall`): the arguments, host, mean curves, scanned_to_reach and every head's curves.
nlohmann::json ood_recall_json(const OodRecallReport& r);

}  // namespace retro
