#pragma once
// `retro-bench run CONFIG` / `retro-bench validate CONFIG` for "experiment": "ood-recall" configs
// (configs/paper/ood-recall.json; docs/config.md): the CLI side, printing what
// lib/analysis/ood_recall_config.hpp computes and writes. Implemented in cmd_ood_recall.cpp.
#include <nlohmann/json.hpp>
#include <string>

#include "analysis/ood_recall_config.hpp"

namespace retro::cli {

struct OodConfigRun {
    std::string results_root = "results";
    bool resume = false, force = false;
    bool wait_lock = false;  ///< wait for the results directory's lock instead of refusing
    int threads = -1;  ///< overrides the config when >= 0
    bool validate_only = false;  ///< check keys and traces (absent ones must have a synth recipe), print, run nothing
    bool quiet = false;  ///< no progress lines (-q); the tables and the files written are still printed
};

/// Runs (or with `validate_only` checks and describes) an ood-recall config: one
/// <results_root>/<name>/ood-recall-<index>[-<mips>]-<trace stem>.json per trace x index entry, each
/// table printed as `retro-bench ood-recall` prints it. Returns the exit code.
int run_ood_config(const nlohmann::json& j, const std::string& origin, const OodConfigRun& opt);

}  // namespace retro::cli
