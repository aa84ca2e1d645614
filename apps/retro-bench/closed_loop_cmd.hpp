#pragma once
// The closed-loop experiment (docs/closed-loop.md) as the CLI runs it: `retro-bench run CONFIG` when the
// config says "experiment": "closed-loop". The C++ side checks the config's keys and every method's
// parameters against the registry (the same checks as a replay config's "methods"), then runs the Python
// side (retro_bench.closedloop.closed_loop, of the package beside the binary: build/python/retro_bench with
// the compiled core) with the dump venv's interpreter; the model work happens there.
#include <nlohmann/json.hpp>
#include <string>

namespace retro::cli {

/// True when a config JSON asks for the closed-loop experiment ("experiment": "closed-loop").
bool is_closed_loop_config(const nlohmann::json& j);

struct ClosedLoopRun {
    std::string results_root = "results";
    bool resume = false, force = false;
    bool wait_lock = false;  ///< wait for another writer of the results directory to finish (--wait-lock)
    bool validate_only = false;  ///< check and print the runs, launch nothing
    /// "I/N": only the I-th of N groups of cases (cases sharing a prompt prefix stay together; every run
    /// of those cases); empty = every case. docs/closed-loop.md "Sharded".
    std::string shard;
    /// > 0: print which cases each of this many shards holds and which of their parts the results directory
    /// has (the tokenizer alone: no model loaded, no lock taken, nothing written), then exit.
    int shard_plan = 0;
    bool quiet = false;  ///< no progress lines from the model process (-q); its tables, results and errors stay
    int threads = -1;  ///< > 0: overrides the config's "threads" (a shard's cores); otherwise the config's
    /// "fidelity", "niah" or "task": only the cases of that kind; the directory stays "partial" (a last run
    /// without it writes runs.jsonl). Empty = every kind.
    std::string only_kind;
    std::string device;  ///< "cpu" or "cuda": where the model's forward runs; empty = the script's default (cpu)
    /// The command as given, recorded in the manifest's sessions (RunArgs::command_line()); empty: built
    /// from the fields above.
    std::string command_line;
};

/// Checks the config (ConfigError naming the file and key or method parameter), prints the runs and,
/// unless validate_only, launches the Python runner and returns its exit code.
int run_closed_loop_config(const nlohmann::json& j, const std::string& origin, const ClosedLoopRun& opt);

}  // namespace retro::cli
