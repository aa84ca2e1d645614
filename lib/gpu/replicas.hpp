#pragma once
// The B replicas of a GPU layer run that compute the same request must agree. JSON-free.
#include <cstddef>

namespace retro {

/// Largest relative L2 distance of a replica's outputs from those of the first replica of its sequence: out
/// [B, rows]; replica b is sequence b % sequences (GpuLayerJob::sequences), so with one sequence every replica
/// against replica 0 (0 when no two replicas share a sequence).
double replica_diff(const float* out, int B, size_t rows, int sequences = 1);

}  // namespace retro
