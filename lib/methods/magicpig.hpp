#pragma once
// `magicpig`: MagicPIG (lib/methods/magicpig.cpp; its JSON-free core methods/magicpig_head.hpp).
// docs/methods/magicpig.md.
#include <nlohmann/json.hpp>

#include "methods/magicpig_head.hpp"

namespace retro {

/// A run's resolved `magicpig` parameters (K, L, seed, min_collisions, sink, window) as the head's: what the
/// method and its GPU twin's binding (lib/bench/gpu_job_params.cpp) build from.
MagicPigHeadParams magicpig_params_from_json(const nlohmann::json& j);

}  // namespace retro
