#pragma once
// Exact top-k selection over a score array: the indices of the k largest values, largest first, ties
// broken by lower index — the order every method and metric of the project uses, so any two callers
// select the same set in the same order. Few of many (k <= n/16): one pass with a heap of the k best
// (most values cost one compare); otherwise nth_element over a copy of the values (floats, no index
// indirection) gives the k-th largest, and one scan collects the indices. Both replace nth_element
// over indices with a (value, index) comparator, with the same result and faster at the closed loop's
// shapes (bench_index_build's BM_ExactMipsKnn; docs/performance.md). Scores must not be NaN.
#include <cstdint>
#include <vector>

namespace retro {

/// Reusable buffers of top_k_into (one per thread).
struct TopKScratch {
    std::vector<float> vals;
    std::vector<int32_t> ties;
};

/// out = indices of the k largest of v: [n] (k clamped to [0, n]), largest first, ties by lower index.
void top_k_into(const float* v, int n, int k, std::vector<int32_t>& out, TopKScratch& s);

/// The same, returning a new vector.
std::vector<int32_t> top_k_indices(const float* v, int n, int k);

}  // namespace retro
