#pragma once
// Metric registry (name, description, unit, direction, level) and aggregation over samples.
// Definitions are in docs/metrics.md; they are computed by the harness (metrics/evaluator), never by a
// method.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace retro {

enum class Direction { higher_better, lower_better, neutral };

/// Where a metric is sampled: once per (query head, step), once per (KV head, step) or once per KV head.
enum class MetricLevel { q_step, kv_step, kv_head };

struct MetricInfo {
    std::string name;         ///< e.g. "recall@100", "mass"
    std::string description;  ///< one line
    std::string unit;         ///< "" for ratios
    Direction direction = Direction::neutral;
    MetricLevel level = MetricLevel::q_step;
    double worst = 0.0;  ///< value a failed/empty sample would have (ann-benchmarks' "worst")
};

/// The registered metrics for a run with the given recall cut-offs (recall@k for each k), in
/// display order.
std::vector<MetricInfo> metric_registry(const std::vector<int>& recall_k);

/// The metrics the CUDA backend adds (docs/cuda.md): per layer step, measured with CUDA events, and the
/// cost model's prediction for the same work at the run's batch; repeated on each KV head's samples.
std::vector<MetricInfo> gpu_metric_registry();

/// Looks a metric up by name in `registry`; nullptr if absent.
const MetricInfo* find_metric(const std::vector<MetricInfo>& registry, const std::string& name);

/// Summary statistics of a sample: mean, p10, p50, p90, min, max, count. Percentiles use linear
/// interpolation between order statistics (numpy's default). Empty samples give count 0 and NaN.
struct Aggregate {
    double mean = 0, p10 = 0, p50 = 0, p90 = 0, min = 0, max = 0;
    size_t count = 0;
    nlohmann::json to_json() const;
};
Aggregate aggregate(std::vector<double> samples);

const char* direction_name(Direction d);
const char* level_name(MetricLevel l);

}  // namespace retro
