#pragma once
// `wave`: RetroInfer's wave index (segmented spherical k-means, tripartite attention: steady zone,
// retrieval zone, estimation zone; decode-time index updates). See docs/methods/wave.md.
#include "methods/params.hpp"

namespace retro {

MethodInfo wave_method_info();

}  // namespace retro
