#pragma once
// Result files (docs/results.md). A results directory holds
//   manifest.json            resolved config, revision, host, BLAS, start/end time, status
//   parts/<run_id>/L<l>_H<h>.json   per (run, layer, KV head) samples: the unit of --resume
//     (a damaged one is moved aside to L<l>_H<h>.json.damaged by --resume: bench/damaged_parts.hpp)
//   runs/<run_id>.json       one record per trace x method x params with aggregates, once complete
//   runs.jsonl               every complete record, one per line (regenerated from runs/)
//   per_head.csv             per (run, layer, query head) means over steps (regenerated from parts/)
// Every file is written atomically (temp + rename): an interrupted run leaves only whole files.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "metrics/metrics.hpp"

namespace retro {

/// Samples of one run on one (layer, KV head).
struct HeadPart {
    std::string run_id;
    int layer = 0;
    int kv_head = 0;
    std::vector<int> q_heads;  ///< global query-head indices of the group
    std::vector<int> steps;    ///< decode steps evaluated
    /// Fingerprint of the trace the samples come from (trace/fingerprint.hpp); "" in parts written
    /// before fingerprints existed. --resume compares it with the trace's (bench/runner.cpp).
    std::string trace_fingerprint;
    double build_ms = 0;
    /// q_step metrics: name -> [group][steps]
    std::map<std::string, std::vector<std::vector<double>>> q_metrics;
    /// kv_step metrics: name -> [steps]
    std::map<std::string, std::vector<double>> kv_metrics;
    /// Where the part was made: {"revision", "config_hash", "host", "shard", "written_at"} (null in parts
    /// written before it was recorded). `retro-bench merge` refuses parts of another revision or config.
    nlohmann::json origin;
    /// The method's source identity (MethodInfo::source: a Python method's file and SHA-256); null for
    /// compiled methods, whose parts do not carry the key.
    nlohmann::json method_source;

    nlohmann::json to_json() const;
    static HeadPart from_json(const nlohmann::json& j);  ///< throws Error on malformed input
};

/// A part file read and checked against its key (bench/damaged_parts.hpp): `part` when whole and of its
/// key, else `damage` says what is wrong ("truncated JSON (...)", "another unit's part: ...").
struct PartCheck {
    HeadPart part;
    std::string damage;
    bool ok() const { return damage.empty(); }
};

class ResultsDir {
  public:
    /// `origin` (when not null) is stamped into every part written, with the time of writing.
    explicit ResultsDir(std::string dir, nlohmann::json origin = {})
        : dir_(std::move(dir)), origin_(std::move(origin)) {}
    const std::string& path() const { return dir_; }

    std::string part_path(const std::string& run_id, int layer, int kv_head) const;
    bool has_part(const std::string& run_id, int layer, int kv_head) const;
    void write_part(const HeadPart& p) const;
    /// The part, checked as check_part; throws Error naming the file and its damage when it is damaged.
    HeadPart read_part(const std::string& run_id, int layer, int kv_head) const;
    /// Reads and fully parses the part of (run_id, layer, kv_head) and checks that it holds that key: one
    /// parse, so --resume can check every part it keeps. Throws Error only when the file cannot be read.
    PartCheck check_part(const std::string& run_id, int layer, int kv_head) const;

    std::string run_path(const std::string& run_id) const;
    void write_run(const std::string& run_id, const nlohmann::json& record) const;
    /// Every complete run record under runs/, sorted by their "index" field then run_id.
    std::vector<nlohmann::json> read_runs() const;

    /// True when the directory holds any result (parts or runs).
    bool has_results() const;

  private:
    std::string dir_;
    nlohmann::json origin_;
};

/// Aggregates of one run over all its parts: {"metrics": {name: Aggregate}, "per_layer": {name:
/// {layer: mean}}}. Samples are pooled over (layer, head, step); build_ms over (layer, KV head).
nlohmann::json aggregate_parts(const std::vector<HeadPart>& parts, const std::vector<MetricInfo>& reg);

/// CSV header and rows (per layer x query head: means over steps) for the given parts of one run.
std::string per_head_csv_header(const std::vector<MetricInfo>& reg);
std::string per_head_csv_rows(const nlohmann::json& record, const std::vector<HeadPart>& parts,
                              const std::vector<MetricInfo>& reg);

}  // namespace retro
