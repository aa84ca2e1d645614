#pragma once
// Assembling a results directory's summary files from its part files (docs/results.md): the manifest's
// description of the sweep, one record per complete run (runs/<run_id>.json, runs.jsonl) and
// per_head.csv. One code path for a one-machine run (lib/bench/runner) and for `retro-bench merge` of a
// sharded sweep (lib/bench/merge), so both produce the same bytes from the same parts.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/config.hpp"
#include "bench/results.hpp"
#include "bench/runner.hpp"
#include "metrics/metrics.hpp"
#include "system/hardware.hpp"

namespace retro {

/// The metrics a sweep records: the CPU registry plus, for "backend": "cuda", the GPU phase metrics.
std::vector<MetricInfo> sweep_metric_registry(const RunConfig& cfg);

/// Run ids per trace: [traces][cfg.runs].
std::vector<std::vector<std::string>> sweep_run_ids(const RunConfig& cfg, const std::vector<PreparedTrace>& traces);

/// Hash of what decides a sweep's results: the resolved config without "threads". Recorded in every
/// part file and shard session; `retro-bench merge` refuses parts of another config.
std::string config_hash(const RunConfig& cfg);

/// Everything the summary files are made from.
struct SweepSummaryInput {
    const RunConfig& cfg;
    const std::vector<PreparedTrace>& traces;
    const std::vector<std::vector<std::string>>& ids;  ///< [traces][runs]
    const std::vector<MetricInfo>& reg;
    const ResultsDir& rd;
    const HardwareProfile& hw;
    std::string config_path;  ///< recorded as "config_file"
    std::string device;       ///< GPU name ("backend": "cuda"), else ""
    std::string revision;     ///< recorded in every run record
};

/// The manifest's description of the sweep: name, config, hardware, backend, metrics, traces with their
/// run ids. The caller adds host, status, sessions and times.
nlohmann::json sweep_manifest(const SweepSummaryInput& in);

/// A record for every run whose parts are all present (config order, `index` counting trace x run),
/// written to runs/<run_id>.json when new or covering other heads (a record is immutable otherwise),
/// and runs.jsonl + per_head.csv regenerated from them. Returns the records.
std::vector<nlohmann::json> write_run_summaries(const SweepSummaryInput& in);

}  // namespace retro
