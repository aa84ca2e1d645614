#include "metrics/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace retro {

std::vector<MetricInfo> metric_registry(const std::vector<int>& recall_k) {
    using D = Direction;
    using L = MetricLevel;
    std::vector<MetricInfo> r;
    for (int k : recall_k)
        r.push_back({"recall@" + std::to_string(k),
                     "fraction of the exact top-" + std::to_string(k) +
                         " tokens (by score, tie-tolerant) in the exact set S",
                     "", D::higher_better, L::q_step, 0.0});
    r.push_back({"mass", "attention mass captured exactly: sum of softmax weights over S", "",
                 D::higher_better, L::q_step, 0.0});
    r.push_back({"out_err", "relative L2 error of the attention output ||o_hat - o|| / ||o||", "",
                 D::lower_better, L::q_step, 1.0});
    r.push_back({"out_cos", "cosine similarity of approximate and exact attention outputs", "",
                 D::higher_better, L::q_step, 0.0});
    r.push_back({"lse_err", "|lse_hat - lse|, error of the log-sum-exp of scores", "",
                 D::lower_better, L::q_step, std::numeric_limits<double>::infinity()});
    r.push_back({"exact_frac", "|S| / n: fraction of visible tokens attended exactly", "",
                 D::lower_better, L::q_step, 1.0});
    r.push_back({"est_frac", "sum of estimated cluster sizes / n: fraction covered by estimation", "",
                 D::neutral, L::q_step, 0.0});
    r.push_back({"scan_ops", "inner products (or equivalent) the selection performed, / n", "",
                 D::lower_better, L::kv_step, 1.0});
    r.push_back({"h2d_bytes", "bytes host-to-device over PCIe this step, per KV head, after the GPU block cache",
                 "B", D::lower_better, L::kv_step, 0.0});
    // system model (lib/system, docs/system-model.md)
    r.push_back({"fetch_bytes", "bytes host-to-device the method asks for this step without a GPU cache, per KV head",
                 "B", D::lower_better, L::kv_step, 0.0});
    r.push_back({"cache_hit", "fraction of the needed CPU-side blocks served from the GPU block cache (steps "
                 "that need any)", "", D::higher_better, L::kv_step, 0.0});
    r.push_back({"fetch_units", "transfer units (clusters, token blocks) needed from CPU memory this step", "",
                 D::lower_better, L::kv_step, 0.0});
    r.push_back({"gpu_read_bytes", "GPU memory bytes read this step by exact attention and selection, per KV head",
                 "B", D::lower_better, L::kv_step, 0.0});
    r.push_back({"model_us", "modeled attention time of one layer step at batch 1 on the hardware profile, all KV "
                 "heads like this one", "us", D::lower_better, L::kv_step, 0.0});
    r.push_back({"d2h_bytes", "bytes device-to-host over PCIe this step, per KV head", "B",
                 D::lower_better, L::kv_step, 0.0});
    r.push_back({"gpu_bytes", "GPU-resident bytes for this KV head (KV kept on GPU, index, cache)", "B",
                 D::lower_better, L::kv_step, 0.0});
    r.push_back({"select_us", "measured CPU time of Method::select for the GQA group", "us",
                 D::lower_better, L::kv_step, 0.0});
    r.push_back({"attend_us", "measured CPU time of attention over the selection for the GQA group",
                 "us", D::lower_better, L::kv_step, 0.0});
    r.push_back({"build_ms", "measured time of Method::build over the prompt, per KV head (backend cuda: the layer's shared "
                 "index build's wall time, its heads built side by side, over the KV heads)", "ms",
                 D::lower_better, L::kv_head, 0.0});
    return r;
}

std::vector<MetricInfo> gpu_metric_registry() {
    using D = Direction;
    const auto step = [](std::string name, std::string what, std::string unit, D dir = D::lower_better) {
        return MetricInfo{std::move(name), std::move(what), std::move(unit), dir, MetricLevel::kv_step, 0.0};
    };
    const std::string m = "measured with CUDA events, one layer step, the whole batch: ";
    const std::string p = "cost model on the hardware profile for the measured work at the run's batch: ";
    return {
        step("gpu_select_us", m + "cluster ranking (cluster_rank)", "us"),
        step("gpu_estimate_us", m + "estimation-zone attention (estimate_attention)", "us"),
        step("gpu_gather_us", m + "execution-buffer assembly (GPU cache hits, misses zero-copy over PCIe)", "us"),
        step("gpu_attend_us", m + "decode attention over the execution buffer (full: all KV) with the LSE merge", "us"),
        step("gpu_step_us", m + "the attention step on the critical path, first kernel to the end of attention "
                                "(host lookup included)", "us"),
        step("gpu_host_us", "host wall time of the cache lookup and copy list, one layer step, the whole batch", "us"),
        step("gpu_admit_us", m + "GPU cache admission scatter after the step, on the same stream", "us"),
        step("gpu_total_us", m + "the step under the one timing rule: gpu_step_us + gpu_admit_us, everything the "
                                 "step causes before the next can start (GpuStepTimes::total_us)", "us"),
        step("gpu_gate_timed_out", "1 when the step's launch gate ended by its timeout (cuda.launch_gate): the host "
                                   "took longer than 20 ms to issue the step, whose times then include its launch calls",
             ""),
        step("gpu_graph_us", "host wall time capturing and instantiating the step's CUDA graph (cuda.step_graph) in "
                             "this step: 0 on a replay and without the graph", "us"),
        step("gpu_h2d_bytes", "KV bytes read from pinned host memory over PCIe, one layer step, the whole batch", "B"),
        step("gpu_d2h_bytes", "cluster ids read back by the host, one layer step, the whole batch", "B"),
        step("gpu_head_h2d_bytes", "this KV head's measured PCIe KV bytes for one sequence (h2d_bytes: the "
                                   "system model's)", "B"),
        step("gpu_replica_diff", "largest relative L2 difference of a replica's outputs from replica 0's", ""),
        step("model_select_us", p + "select_us (index reads: ranking + estimation)", "us"),
        step("model_h2d_us", p + "h2d_us (PCIe)", "us"),
        step("model_attend_us", p + "attend_us (exact attention reads)", "us"),
        step("model_step_us", p + "attention_us (the layer's attention step after overlap)", "us"),
    };
}

const MetricInfo* find_metric(const std::vector<MetricInfo>& registry, const std::string& name) {
    for (const auto& m : registry)
        if (m.name == name) return &m;
    return nullptr;
}

namespace {
double quantile_sorted(const std::vector<double>& s, double q) {
    if (s.size() == 1) return s[0];
    const double pos = q * (double)(s.size() - 1);
    const size_t lo = (size_t)std::floor(pos);
    const size_t hi = std::min(lo + 1, s.size() - 1);
    return s[lo] + (pos - (double)lo) * (s[hi] - s[lo]);
}
}  // namespace

Aggregate aggregate(std::vector<double> s) {
    Aggregate a;
    a.count = s.size();
    if (s.empty()) {
        const double nan = std::numeric_limits<double>::quiet_NaN();
        a.mean = a.p10 = a.p50 = a.p90 = a.min = a.max = nan;
        return a;
    }
    std::sort(s.begin(), s.end());
    a.mean = std::accumulate(s.begin(), s.end(), 0.0) / (double)s.size();
    a.p10 = quantile_sorted(s, 0.10);
    a.p50 = quantile_sorted(s, 0.50);
    a.p90 = quantile_sorted(s, 0.90);
    a.min = s.front();
    a.max = s.back();
    return a;
}

nlohmann::json Aggregate::to_json() const {
    auto num = [](double x) -> nlohmann::json {
        return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
    };
    return {{"mean", num(mean)}, {"p10", num(p10)}, {"p50", num(p50)}, {"p90", num(p90)},
            {"min", num(min)},   {"max", num(max)}, {"count", count}};
}

const char* direction_name(Direction d) {
    switch (d) {
        case Direction::higher_better: return "higher_better";
        case Direction::lower_better: return "lower_better";
        default: return "neutral";
    }
}

const char* level_name(MetricLevel l) {
    switch (l) {
        case MetricLevel::q_step: return "query_head_step";
        case MetricLevel::kv_step: return "kv_head_step";
        default: return "kv_head";
    }
}

}  // namespace retro
