#pragma once
// `wave`: RetroInfer's wave index (segmented spherical k-means, tripartite attention: steady zone,
// retrieval zone, estimation zone; decode-time index updates). See docs/methods/wave.md.
#include "methods/params.hpp"
#include "methods/wave_head.hpp"

namespace retro {

/// WaveParams from a resolved parameter object (every wave parameter present, as resolve_params gives).
WaveParams wave_params_from_json(const nlohmann::json& j);

}  // namespace retro
