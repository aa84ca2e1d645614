#pragma once
// `pq`: PQCache (lib/methods/pq.cpp; its JSON-free core methods/pq_head.hpp). docs/methods/pq.md.
#include <nlohmann/json.hpp>

#include "methods/pq_head.hpp"

namespace retro {

/// A run's resolved `pq` parameters (k, m, nbits, iters, sink, window, gqa) as the head's: what the method
/// and its GPU twin's binding (lib/bench/gpu_job_params.cpp) build from.
PqHeadParams pq_params_from_json(const nlohmann::json& j);

}  // namespace retro
