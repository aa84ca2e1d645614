#include "attention/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace retro {

namespace {
inline float dot(const float* a, const float* b, int d) {
    // Four independent accumulators let the compiler vectorize without -ffast-math reassociation.
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int j = 0;
    for (; j + 4 <= d; j += 4) {
        s0 += a[j] * b[j];
        s1 += a[j + 1] * b[j + 1];
        s2 += a[j + 2] * b[j + 2];
        s3 += a[j + 3] * b[j + 3];
    }
    for (; j < d; ++j) s0 += a[j] * b[j];
    return (s0 + s1) + (s2 + s3);
}
}  // namespace

void attention_scores(const float* q, const float* keys, int n, int d, float scale, float* scores) {
    for (int i = 0; i < n; ++i) scores[i] = scale * dot(q, keys + (size_t)i * d, d);
}

void attention_scores_ids(const float* q, const float* keys, std::span<const int32_t> ids, int d,
                          float scale, float* scores) {
    for (size_t j = 0; j < ids.size(); ++j) scores[j] = scale * dot(q, keys + (size_t)ids[j] * d, d);
}

double softmax_inplace(float* s, int n) {
    if (n <= 0) return -std::numeric_limits<double>::infinity();
    float m = s[0];
    for (int i = 1; i < n; ++i) m = std::max(m, s[i]);
    double sum = 0;
    for (int i = 0; i < n; ++i) {
        s[i] = std::exp(s[i] - m);
        sum += s[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; ++i) s[i] *= inv;
    return (double)m + std::log(sum);
}

double PartialAttention::lse() const {
    return empty() ? -std::numeric_limits<double>::infinity() : m + std::log(l);
}

void PartialAttention::output(float* out) const {
    const size_t d = acc.size();
    if (empty()) {
        std::fill(out, out + d, 0.0f);
        return;
    }
    for (size_t j = 0; j < d; ++j) out[j] = (float)(acc[j] / l);
}

namespace {
// Rescales p so that its running max is at least s; returns exp(s - p.m) after rescaling.
inline double rebase(PartialAttention& p, double s) {
    if (s > p.m) {
        const double f = p.l == 0.0 ? 0.0 : std::exp(p.m - s);
        if (f != 1.0) {
            p.l *= f;
            for (double& a : p.acc) a *= f;
        }
        p.m = s;
        return 1.0;
    }
    return std::exp(s - p.m);
}
}  // namespace

void add_token(PartialAttention& p, double s, const float* v, int d) {
    const double w = rebase(p, s);
    p.l += w;
    for (int j = 0; j < d; ++j) p.acc[j] += w * v[j];
}

void add_estimated_cluster(PartialAttention& p, double s, double size, const float* vsum, int d) {
    if (size <= 0) return;
    const double w = rebase(p, s);
    p.l += w * size;
    for (int j = 0; j < d; ++j) p.acc[j] += w * vsum[j];
}

void merge(PartialAttention& p, const PartialAttention& q) {
    if (q.empty()) return;
    if (p.empty()) {
        p = q;
        return;
    }
    const double m = std::max(p.m, q.m);
    const double fp = std::exp(p.m - m), fq = std::exp(q.m - m);
    p.l = p.l * fp + q.l * fq;
    for (size_t j = 0; j < p.acc.size(); ++j) p.acc[j] = p.acc[j] * fp + q.acc[j] * fq;
    p.m = m;
}

PartialAttention partial_attention_ids(const float* q, const float* keys, const float* values,
                                       std::span<const int32_t> ids, int d, float scale,
                                       const float* log_w) {
    PartialAttention p(d);
    if (ids.empty()) return p;
    std::vector<float> s(ids.size());
    attention_scores_ids(q, keys, ids, d, scale, s.data());
    if (log_w)
        for (size_t j = 0; j < ids.size(); ++j) s[j] += log_w[j];
    const float m = *std::max_element(s.begin(), s.end());
    p.m = m;
    for (size_t j = 0; j < ids.size(); ++j) {
        const double w = std::exp((double)s[j] - m);
        p.l += w;
        const float* v = values + (size_t)ids[j] * d;
        for (int c = 0; c < d; ++c) p.acc[c] += w * v[c];
    }
    return p;
}

void weighted_value_sum(const float* w, const float* values, int n, int d, float* out) {
    // float32 accumulation: weights sum to 1, so the result is bounded by max |v|. This is the
    // memory-bound reference path (reads V once).
    std::vector<float> o((size_t)d, 0.0f);
    for (int i = 0; i < n; ++i) {
        const float wi = w[i];
        const float* v = values + (size_t)i * d;
        for (int j = 0; j < d; ++j) o[j] += wi * v[j];
    }
    std::copy(o.begin(), o.end(), out);
}

double exact_attention(const float* q, const float* keys, const float* values, int n, int d,
                       float scale, float* out, std::vector<float>& a) {
    a.resize((size_t)n);
    attention_scores(q, keys, n, d, scale, a.data());
    const double lse = softmax_inplace(a.data(), n);
    weighted_value_sum(a.data(), values, n, d, out);
    return lse;
}

}  // namespace retro
