#pragma once
// Ranking the clusters of a wave index for a GQA group (RetroInfer §4.2/§4.3; public code
// sparse_attention: softmax over the centroid scores of each query head, summed over the group).
// Shared by the wave method (lib/methods/wave.cpp) and the CUDA kernel's reference (kernels/).
#include <span>
#include <vector>

namespace retro {

enum class GroupRank { sum, max, mean };

/// agg[j] for j in `valid` (ascending cluster ids) from scores: [g, m] (already scaled, q.c_j * scale):
///   sum:  sum over heads of softmax over the valid clusters     max: max of that softmax
///   mean: mean of the raw scores
/// agg: [m] is (re)initialised to 0 (sum, mean) or -inf (max); entries outside `valid` keep that value.
/// w: scratch, resized to m. The softmax sum runs in double, weights in float.
void group_cluster_weights(const float* scores, int g, int m, std::span<const int> valid, GroupRank mode,
                           std::vector<float>& agg, std::vector<float>& w);

/// The valid ids ordered by agg descending, ties by the lower id (the order the wave method selects in).
std::vector<int> rank_clusters(const std::vector<float>& agg, std::span<const int> valid);

}  // namespace retro
