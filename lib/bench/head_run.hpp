#pragma once
// Pieces of running one (run, layer, KV head) that the CPU runner (bench/runner.cpp) and the CUDA
// backend's runner (bench/cuda_runner.cpp) share: the method context of a head, a fresh result part, and
// recording a step's query-head metrics into it.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/results.hpp"
#include "methods/method.hpp"
#include "metrics/evaluator.hpp"

namespace retro {

/// The context a method gets for `slice` (scale 1/sqrt(d), byte accounting in `storage`); seed 0.
MethodContext head_context(const HeadSlice& slice, DType storage);

/// The seed `retro-bench run` gives a method instance (MethodContext::seed): a hash of the method, its
/// resolved build parameters (search-time ones left out, ParamSpec::search: points that differ only in
/// them build the same index, so one build can serve them all) and the head, not of the system point (a
/// cache sweep replays the same selections under every cache setting). The Python binding uses it too,
/// so its selections match a run's.
unsigned method_seed(const std::string& method, const nlohmann::json& params, int layer, int kv_head);

/// An empty part of `run_id` for the slice's (layer, KV head) over `steps`, with a sample list for
/// every q_step metric of `reg` (per query head) and every kv_step metric, stamped with the fingerprint
/// of the trace it is computed from (trace/fingerprint.hpp; --resume checks it).
HeadPart new_head_part(const std::string& run_id, const HeadSlice& slice, const std::vector<int>& steps,
                       const std::string& trace_fingerprint, const std::vector<MetricInfo>& reg);

/// Appends one step's metrics of every query head of the group (qm: [group]).
void add_query_metrics(HeadPart& part, const std::vector<QueryMetrics>& qm, const std::vector<int>& recall_k);

}  // namespace retro
