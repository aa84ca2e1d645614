#pragma once
// Attention for a whole GQA group at once: the g query heads that share one KV head read K and V once
// (a [g, d] x [d, n] product for the scores and a [g, n] x [n, d] product for the outputs, both sgemm),
// instead of once per query head. The reference path of the harness (lib/metrics/evaluator) and of the
// methods that score every key (oracle_topk); same results as the per-head functions of attention.hpp
// to float tolerance (float32 products and weights instead of double accumulation).
#include <cstdint>
#include <span>
#include <vector>

#include "attention/attention.hpp"

namespace retro {

/// scores: [g, n] = scale * Q K^T for queries q: [g, d] and keys: [n, d] (row-major).
void group_attention_scores(const float* q, int g, const float* keys, int n, int d, float scale,
                            float* scores);

/// Exact attention of a group over tokens [0, n): on entry w: [g, n] holds the scores, on return the
/// softmax weights of each row; out: [g, d] outputs, lse: [g] log-sum-exp of each row's scores.
/// values: [n, d]. V is read once for the whole group.
void group_softmax_output(float* w, int g, int n, const float* values, int d, float* out, double* lse);

/// Buffers reused across calls (one per evaluator): the gathered rows, the scores and weights, and
/// the token -> union position map.
struct GroupScratch {
    std::vector<float> k, v;      ///< [u, d] gathered keys/values of the union of the lists
    std::vector<float> s, w, o;   ///< [g, u] scores, [g, u] weights, [g, d] outputs
    std::vector<int32_t> uni;     ///< [u] union of the lists' token ids
    std::vector<int32_t> pos;     ///< [n] position in `uni` of a token (valid where stamp == gen)
    std::vector<uint32_t> stamp;  ///< [n]
    uint32_t gen = 0;
};

/// Partial attention of every group member h over its own token list lists[h] (lists[h] may all be the
/// same list: a shared selection), with optional per-token log weights log_w[h] (parallel to lists[h],
/// nullptr = none), in one pass over the union of the lists: the union's keys and values are read once
/// (gathered unless the union is a contiguous range of tokens), scored for the whole group with one
/// sgemm, and each member keeps only its own tokens. q: [g, d]; keys/values: [>= max id + 1, d].
/// Ids within a list must be unique (the evaluator checks). Returns g partials (acc in float precision).
std::vector<PartialAttention> group_partial_attention(const float* q, int g, const float* keys,
                                                      const float* values, int d, float scale,
                                                      std::span<const std::span<const int32_t>> lists,
                                                      std::span<const float* const> log_w,
                                                      GroupScratch& scratch);

}  // namespace retro
