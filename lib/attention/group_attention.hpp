#pragma once
// Attention for a whole GQA group at once: the g query heads that share one KV head read K and V once
// instead of once per query head. The reference path of the harness (lib/metrics/evaluator: the exact
// attention with its [g, n] scores and weights), the attention over a selection (lib/metrics/
// selection_output), and the methods that score every key (oracle_topk). The attention runs the fused
// single-pass kernel of group_flash.hpp; the scores alone are one [g, d] x [d, n] sgemm. Same results
// as the per-head functions of attention.hpp to float tolerance.
#include <cstdint>
#include <span>
#include <vector>

#include "attention/attention.hpp"
#include "attention/group_flash.hpp"

namespace retro {

/// scores: [g, n] = scale * Q K^T for queries q: [g, d] and keys: [n, d] (row-major).
void group_attention_scores(const float* q, int g, const float* keys, int n, int d, float scale,
                            float* scores);

/// Exact attention of a group over tokens [0, n) in one pass over K and V (group_flash.hpp): writes
/// scores: [g, n] (scale * Q K^T) and weights: [g, n] (softmax of each row) unless nullptr, out: [g, d]
/// and lse: [g] (log-sum-exp of each row's scores). q: [g, d]; keys/values: [n, d].
void group_exact_attention(const float* q, int g, const float* keys, const float* values, int n, int d, float scale,
                           float* scores, float* weights, float* out, double* lse, GroupFlashScratch& scratch);

/// Buffers reused across calls (one per evaluator): the fused kernel's blocks, the members' masks over
/// the union of their lists, and the token -> union position map.
struct GroupScratch {
    GroupFlashScratch flash;
    std::vector<float> bias;           ///< [g, u] log weight of a member's token, -inf where not its token
    std::vector<const float*> bias_row;  ///< [g] rows of `bias` (or the callers' log weights)
    std::vector<int32_t> uni;     ///< [u] union of the lists' token ids
    std::vector<int32_t> pos;     ///< [n] position in `uni` of a token (valid where stamp == gen)
    std::vector<uint32_t> stamp;  ///< [n]
    uint32_t gen = 0;
};

/// Partial attention of every group member h over its own token list lists[h] (lists[h] may all be the
/// same list: a shared selection), with optional per-token log weights log_w[h] (parallel to lists[h],
/// nullptr = none), in one pass over the union of the lists: the union's keys and values are read once
/// (group_flash_attention over the union's rows; a member's tokens outside its list get a -inf bias), and
/// each member keeps only its own tokens. q: [g, d]; keys/values: [>= max id + 1, d].
/// Ids within a list must be unique (the evaluator checks). Returns g partials.
std::vector<PartialAttention> group_partial_attention(const float* q, int g, const float* keys,
                                                      const float* values, int d, float scale,
                                                      std::span<const std::span<const int32_t>> lists,
                                                      std::span<const float* const> log_w,
                                                      GroupScratch& scratch);

}  // namespace retro
