#pragma once
// Exact and partial attention for one query vector, float32 throughout.
//
// A partial attention over a token set S is the triple (m, l, acc) with m = max_{i in S} s_i,
// l = sum_{i in S} exp(s_i - m), acc = sum_{i in S} exp(s_i - m) v_i. Two partials over disjoint sets
// merge exactly into the partial over their union (the LSE merge FlashDecoding, RetrievalAttention's
// GPU/CPU split and RetroInfer's zones all use); output = acc / l and lse = m + log l.
// RetroInfer's estimated clusters (Eq. 2-4) enter as a partial whose "tokens" are clusters with weight
// n_j * exp(q.c_j * scale) and value VS_j / n_j: see add_estimated_cluster.
#include <cstdint>
#include <span>
#include <vector>

namespace retro {

/// scores[i] = scale * dot(q, keys[i]) for i in [0, n). q: [d], keys: [n, d] row-major, scores: [n].
void attention_scores(const float* q, const float* keys, int n, int d, float scale, float* scores);

/// Same for a subset: scores[j] = scale * dot(q, keys[ids[j]]).
void attention_scores_ids(const float* q, const float* keys, std::span<const int32_t> ids, int d,
                          float scale, float* scores);

/// In-place stable softmax over scores [n]; returns lse = log sum exp(scores).
double softmax_inplace(float* scores, int n);

struct PartialAttention {
    double m = -1e300;        ///< running max score (-1e300 = empty)
    double l = 0.0;           ///< sum of exp(s - m) (weights; clusters count n_j times)
    std::vector<double> acc;  ///< [d] sum of exp(s - m) * value

    explicit PartialAttention(int d = 0) : acc((size_t)d, 0.0) {}
    bool empty() const { return l == 0.0; }
    double lse() const;                 ///< m + log l; -inf if empty
    void output(float* out) const;      ///< out[d] = acc / l (zeros if empty)
};

/// Adds token i with score s and value v [d].
void add_token(PartialAttention& p, double s, const float* v, int d);

/// Adds an estimated cluster: `size` tokens represented by centroid score s (= scale * q.c_j) and value
/// sum vsum [d]; contributes size * exp(s) to the denominator and exp(s) * vsum to the numerator
/// (RetroInfer Eq. 2-4). A cluster of size 1 whose centroid is the key is exactly that token.
void add_estimated_cluster(PartialAttention& p, double s, double size, const float* vsum, int d);

/// p <- partial over the union of the sets of p and q (disjoint sets assumed).
void merge(PartialAttention& p, const PartialAttention& q);

/// Partial attention of q over the listed tokens (ids need not be sorted). keys/values: [n, d].
/// log_w (optional, [ids.size()]): per-token log weights added to the scores, i.e. token j counts
/// exp(log_w[j]) times in numerator and denominator (importance-sampling corrections, MagicPIG).
PartialAttention partial_attention_ids(const float* q, const float* keys, const float* values,
                                       std::span<const int32_t> ids, int d, float scale,
                                       const float* log_w = nullptr);

/// out[d] = sum_i w[i] * values[i] over i in [0, n). w: [n], values: [n, d].
void weighted_value_sum(const float* w, const float* values, int n, int d, float* out);

/// Exact attention over tokens [0, n): writes out [d] and returns lse. `scratch` is resized to n and
/// left holding the softmax weights a_i (callers use them for mass and top-k).
double exact_attention(const float* q, const float* keys, const float* values, int n, int d,
                       float scale, float* out, std::vector<float>& scratch);

}  // namespace retro
