#pragma once
// The reference methods: full attention, the exact top-k oracle, and StreamingLLM's sink + window.
#include "methods/params.hpp"

namespace retro {

MethodInfo full_method_info();
MethodInfo oracle_topk_method_info();
MethodInfo streaming_method_info();

}  // namespace retro
