#include "attention/group_attention.hpp"

#ifndef RETRO_NO_BLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/serial_blas.hpp"

namespace retro {

void group_attention_scores(const float* q, int g, const float* keys, int n, int d, float scale,
                            float* scores) {
    if (g <= 0 || n <= 0) return;
#ifndef RETRO_NO_BLAS
    // Serial BLAS: the results must not depend on the thread count (core/serial_blas.hpp).
    const SerialBlas serial;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g, n, d, scale, q, d, keys, d, 0.0f, scores, n);
#else
    // The GPU-only build (docs/cuda.md) has no BLAS: the same product, one row of scores per query.
    for (int h = 0; h < g; ++h) attention_scores(q + (size_t)h * d, keys, n, d, scale, scores + (size_t)h * n);
#endif
}

namespace {
// The fused pass over rows [0, n) of keys/values for the group's queries q: [g, d].
GroupFlashArgs flash_args(const float* q, int g, const float* keys, const float* values, int n, int d, float scale) {
    GroupFlashArgs a;
    a.q = q;
    a.g = g;
    a.d = d;
    a.scale = scale;
    a.keys = keys;
    a.values = values;
    a.n = n;
    return a;
}
}  // namespace

void group_exact_attention(const float* q, int g, const float* keys, const float* values, int n, int d, float scale,
                           float* scores, float* weights, float* out, double* lse, GroupFlashScratch& scratch) {
    std::vector<PartialAttention> parts((size_t)std::max(g, 0));
    GroupFlashArgs a = flash_args(q, g, keys, values, n, d, scale);
    a.scores = scores;
    a.weights = weights;
    group_flash_attention(a, parts, scratch);
    for (int h = 0; h < g; ++h) {
        parts[(size_t)h].output(out + (size_t)h * d);
        lse[h] = parts[(size_t)h].lse();
    }
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

    GroupFlashArgs a = flash_args(q, g, keys, values, u, d, scale);
    // a contiguous range is read in place, anything else row by row through the ids (never copied)
    bool contiguous = true;
    for (int j = 1; j < u && contiguous; ++j) contiguous = ids[(size_t)j] == ids[0] + j;
    if (contiguous) {
        a.keys += (size_t)ids[0] * d;
        a.values += (size_t)ids[0] * d;
    } else {
        a.ids = ids.data();
    }

    // ---- each member's bias over the read tokens: its log weights, -inf outside its own list ----
    bool direct = shared;  // shared list: the callers' log weights are already parallel to it
    for (const float* lw : log_w) direct = direct && lw != nullptr;
    if (direct && !log_w.empty()) {
        a.bias = log_w;
    } else if (!direct) {
        x.bias.assign((size_t)g * u, shared ? 0.0f : -std::numeric_limits<float>::infinity());
        x.bias_row.resize((size_t)g);
        for (int h = 0; h < g; ++h) {
            const auto l = lists[(size_t)h];
            const float* lw = log_w.empty() ? nullptr : log_w[(size_t)h];
            float* row = x.bias.data() + (size_t)h * u;
            for (size_t j = 0; j < l.size(); ++j)
                row[shared ? j : (size_t)x.pos[(size_t)l[j]]] = lw ? lw[j] : 0.0f;
            x.bias_row[(size_t)h] = row;
        }
        a.bias = x.bias_row;
    }
    group_flash_attention(a, parts, x.flash);
    return parts;
}

}  // namespace retro
