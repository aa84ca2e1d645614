#pragma once
// `pq`: PQCache's product-quantized key index (Zhang et al., SIGMOD 2025); the quantizer is
// lib/cluster/pq.hpp. docs/methods/pq.md.
#include "methods/params.hpp"

namespace retro {

MethodInfo pq_method_info();

}  // namespace retro
