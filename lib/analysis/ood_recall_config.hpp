#pragma once
// `retro-bench run CONFIG` for "experiment": "ood-recall" configs (configs/paper/ood-recall.json): the
// ood-recall experiment (analysis/ood_recall_run.hpp) for every trace x index entry, one JSON file each
// in the results directory. docs/config.md ("ood-recall experiment").
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/ood_recall_run.hpp"
#include "bench/config.hpp"

namespace retro {

/// True when a config JSON asks for the ood-recall experiment ("experiment": "ood-recall").
bool is_ood_recall_config(const nlohmann::json& j);

/// An ood-recall config, checked: the traces and head selection (through the run-config parser, with its
/// keys, checks and synth recipes) and one OodRecallArgs per entry of "indexes" (trace still empty).
struct OodRecallExperiment {
    RunConfig config;
    std::vector<OodRecallArgs> entries;
};

/// Parses an ood-recall config; keys are checked strictly (ConfigError naming `origin` and the key).
OodRecallExperiment parse_ood_recall_config(const nlohmann::json& j, const std::string& origin);

struct OodRecallConfigRun {
    std::string results_root = "results";
    bool resume = false, force = false;
    bool wait_lock = false;  ///< wait for the results directory's lock instead of refusing
    int threads = -1;  ///< overrides the config when >= 0
};

/// Runs the experiment: for every trace (generated from its "synth" recipe when absent; `progress` gets
/// the generation messages) and every entry, run_ood_recall writing
/// <results_root>/<name>/ood-recall-<index>[-<mips>]-<trace stem>.json, then `written(report, file)`.
/// --resume skips files already written; an existing directory needs resume or force. Returns the number
/// of files written and of files already present.
struct OodRecallConfigCounts {
    int written = 0, skipped = 0;
};
OodRecallConfigCounts run_ood_recall_config(const OodRecallExperiment& e, const OodRecallConfigRun& opt,
                                            const std::function<void(const std::string&)>& progress,
                                            const std::function<void(const OodRecallReport&, const std::string&)>& written);

}  // namespace retro
