#include "attention/group_attention.hpp"

#ifndef RETRO_NO_BLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/serial_blas.hpp"

namespace retro {

namespace {

// c: [m, n] = alpha * a: [m, k] x op(b), op(b) = b^T for b: [n, k] (trans_b) or b: [k, n]; row-major.
// Serial BLAS: the results must not depend on the thread count (cluster/serial_blas.hpp).
void gemm(bool trans_b, int m, int n, int k, float alpha, const float* a, const float* b, float* c) {
#ifndef RETRO_NO_BLAS
    const SerialBlas serial;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, k, b,
                trans_b ? k : n, 0.0f, c, n);
#else
    // The GPU-only build (docs/cuda.md) has no BLAS: the same products as plain loops.
    for (int i = 0; i < m; ++i) {
        float* ci = c + (size_t)i * n;
        if (trans_b) {
            for (int j = 0; j < n; ++j) {
                float acc = 0;
                for (int e = 0; e < k; ++e) acc += a[(size_t)i * k + e] * b[(size_t)j * k + e];
                ci[j] = alpha * acc;
            }
        } else {
            std::fill(ci, ci + n, 0.0f);
            for (int e = 0; e < k; ++e) {
                const float ae = alpha * a[(size_t)i * k + e];
                const float* be = b + (size_t)e * n;
                for (int j = 0; j < n; ++j) ci[j] += ae * be[j];
            }
        }
    }
#endif
}

}  // namespace

void group_attention_scores(const float* q, int g, const float* keys, int n, int d, float scale,
                            float* scores) {
    if (g <= 0 || n <= 0) return;
    gemm(true, g, n, d, scale, q, keys, scores);
}

void group_softmax_output(float* w, int g, int n, const float* values, int d, float* out, double* lse) {
    for (int h = 0; h < g; ++h) lse[h] = softmax_inplace(w + (size_t)h * n, n);
    if (n <= 0) {
        std::fill(out, out + (size_t)g * d, 0.0f);
        return;
    }
    gemm(false, g, d, n, 1.0f, w, values, out);
}

std::vector<PartialAttention> group_partial_attention(const float* q, int g, const float* keys,
                                                      const float* values, int d, float scale,
                                                      std::span<const std::span<const int32_t>> lists,
                                                      std::span<const float* const> log_w,
                                                      GroupScratch& x) {
    std::vector<PartialAttention> parts((size_t)g, PartialAttention(d));
    bool shared = true;
    for (int h = 1; h < g && shared; ++h)
        shared = lists[(size_t)h].data() == lists[0].data() && lists[(size_t)h].size() == lists[0].size();

    // ---- the tokens to read: the shared list, or the union of the members' lists ----
    std::span<const int32_t> ids;
    if (shared) {
        ids = lists[0];
    } else {
        int32_t top = -1;
        for (const auto& l : lists)
            for (int32_t id : l) top = std::max(top, id);
        if (x.stamp.size() < (size_t)top + 1) {
            x.stamp.assign((size_t)top + 1, 0);
            x.pos.resize((size_t)top + 1);
            x.gen = 0;
        }
        if (++x.gen == 0) {
            std::fill(x.stamp.begin(), x.stamp.end(), 0);
            x.gen = 1;
        }
        x.uni.clear();
        for (const auto& l : lists)
            for (int32_t id : l)
                if (x.stamp[(size_t)id] != x.gen) {
                    x.stamp[(size_t)id] = x.gen;
                    x.pos[(size_t)id] = (int32_t)x.uni.size();
                    x.uni.push_back(id);
                }
        ids = x.uni;
    }
    const int u = (int)ids.size();
    if (u == 0) return parts;

    // ---- one read of their keys and values: in place when they are a contiguous range, else gathered ----
    bool contiguous = true;
    for (int j = 1; j < u && contiguous; ++j) contiguous = ids[(size_t)j] == ids[0] + j;
    const float *kp = keys + (size_t)ids[0] * d, *vp = values + (size_t)ids[0] * d;
    if (!contiguous) {
        x.k.resize((size_t)u * d);
        x.v.resize((size_t)u * d);
        for (int j = 0; j < u; ++j) {
            std::memcpy(x.k.data() + (size_t)j * d, keys + (size_t)ids[(size_t)j] * d, sizeof(float) * d);
            std::memcpy(x.v.data() + (size_t)j * d, values + (size_t)ids[(size_t)j] * d, sizeof(float) * d);
        }
        kp = x.k.data();
        vp = x.v.data();
    }
    x.s.resize((size_t)g * u);
    group_attention_scores(q, g, kp, u, d, scale, x.s.data());

    // ---- each member's weights over its own tokens (zero elsewhere in the union) ----
    x.w.resize((size_t)g * u);
    for (int h = 0; h < g; ++h) {
        const auto l = lists[(size_t)h];
        const float* lw = log_w.empty() ? nullptr : log_w[(size_t)h];
        const float* s = x.s.data() + (size_t)h * u;
        float* w = x.w.data() + (size_t)h * u;
        PartialAttention& p = parts[(size_t)h];
        if (l.empty()) {
            std::fill(w, w + u, 0.0f);
            continue;
        }
        // position in the union of the member's j-th token
        const auto at = [&](size_t j) -> size_t { return shared ? j : (size_t)x.pos[(size_t)l[j]]; };
        if (!shared) std::fill(w, w + u, 0.0f);
        float m = -INFINITY;
        for (size_t j = 0; j < l.size(); ++j) m = std::max(m, s[at(j)] + (lw ? lw[j] : 0.0f));
        double sum = 0;
        for (size_t j = 0; j < l.size(); ++j) {
            const float e = std::exp(s[at(j)] + (lw ? lw[j] : 0.0f) - m);
            w[at(j)] = e;
            sum += e;
        }
        p.m = m;
        p.l = sum;
    }
    x.o.resize((size_t)g * d);
    gemm(false, g, d, u, 1.0f, x.w.data(), vp, x.o.data());
    for (int h = 0; h < g; ++h)
        if (!parts[(size_t)h].empty())
            for (int e = 0; e < d; ++e) parts[(size_t)h].acc[(size_t)e] = x.o[(size_t)h * d + e];
    return parts;
}

}  // namespace retro
