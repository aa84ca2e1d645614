#pragma once
// The B replicas of a GPU layer run compute the same request: their outputs must agree. JSON-free.
#include <cstddef>

namespace retro {

/// Largest relative L2 distance of a replica's outputs from replica 0's: out [B, rows] (0 when B = 1).
double replica_diff(const float* out, int B, size_t rows);

}  // namespace retro
