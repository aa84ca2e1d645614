#include "attention/group_flash.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "attention/group_flash_kernels.hpp"

namespace retro {

namespace flash {
namespace {

// The portable block kernels: plain loops over the baseline ISA (and every CPU without AVX2 + FMA).
void score_portable(const float* q, int gp, const float* const* krow, int b, int d, float scale, float* s, int bs,
                    const float* const*) {
    for (int i = 0; i < b; ++i)  // key row i read once from memory, then from L1 for the other heads
        for (int h = 0; h < gp; ++h) attention_scores(q + (size_t)h * d, krow[i], 1, d, scale, s + (size_t)h * bs + i);
}

void exp_portable(float* x, int count) {
    for (int i = 0; i < count; ++i) x[i] = fast_exp(x[i]);
}

void accumulate_portable(const float* e, int gp, const float* const* vrow, int b, int d, float* acc, int bs,
                         const float* const*) {
    for (int i = 0; i < b; ++i) {
        const float* v = vrow[i];
        for (int h = 0; h < gp; ++h) {
            const float w = e[(size_t)h * bs + i];
            if (w == 0.0f) continue;
            float* o = acc + (size_t)h * d;
            for (int c = 0; c < d; ++c) o[c] += w * v[c];
        }
    }
}

}  // namespace

const Kernels& portable_kernels() {
    static const Kernels k{score_portable, exp_portable, accumulate_portable, "portable"};
    return k;
}

const Kernels& kernels_for(int d) {
    const Kernels* a = avx2_kernels();
    return a && d % 16 == 0 ? *a : portable_kernels();
}

}  // namespace flash

const char* group_flash_kernel_name(int d) { return flash::kernels_for(d).name; }

namespace {
// max and sum of x: [b] in 8 independent lanes, so that the compiler vectorizes them without
// reassociating (a single running max or sum is a dependency chain of b steps).
float lanes_max(const float* x, int b) {
    float m[8];
    std::fill(m, m + 8, -std::numeric_limits<float>::infinity());
    int i = 0;
    for (; i + 8 <= b; i += 8)
        for (int j = 0; j < 8; ++j) m[j] = m[j] < x[i + j] ? x[i + j] : m[j];
    for (; i < b; ++i) m[0] = m[0] < x[i] ? x[i] : m[0];
    return *std::max_element(m, m + 8);
}
double lanes_sum(const float* x, int b) {
    float t[8] = {};
    int i = 0;
    for (; i + 8 <= b; i += 8)
        for (int j = 0; j < 8; ++j) t[j] += x[i + j];
    for (; i < b; ++i) t[0] += x[i];
    double sum = 0;
    for (float v : t) sum += v;
    return sum;
}
}  // namespace

void group_flash_attention(const GroupFlashArgs& a, std::span<PartialAttention> parts, GroupFlashScratch& x) {
    const int g = a.g, d = a.d, n = a.n, B = kFlashBlock;
    const int gp = (g + 3) / 4 * 4;
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    for (int h = 0; h < g; ++h) parts[(size_t)h] = PartialAttention(d);
    if (g <= 0 || n <= 0) return;
    const flash::Kernels& k = a.portable ? flash::portable_kernels() : flash::kernels_for(d);

    x.q.assign((size_t)gp * d, 0.0f);  // padded heads: zero queries, their rows are never read back
    std::copy(a.q, a.q + (size_t)g * d, x.q.begin());
    x.s.assign((size_t)gp * B, 0.0f);
    x.acc.resize((size_t)gp * d);
    x.krow.resize((size_t)2 * B);  // two blocks of row pointers: this block's and the next one's
    x.vrow.resize((size_t)2 * B);
    const int blocks = (n + B - 1) / B;
    if (a.weights) x.block_max.resize((size_t)g * blocks);
    std::vector<float> m((size_t)g, kNegInf);  // running max of each member
    // Row pointers of block `blk` into half blk % 2, padded to `len` entries with its last row (a
    // prefetch list must be as long as the block that issues it).
    const auto fill_rows = [&](int blk, int len) {
        const int i0 = blk * B, b = std::min(B, n - i0);
        const float** kr = x.krow.data() + (size_t)(blk % 2) * B;
        const float** vr = x.vrow.data() + (size_t)(blk % 2) * B;
        for (int i = 0; i < len; ++i) {
            const size_t row = a.ids ? (size_t)a.ids[i0 + std::min(i, b - 1)] : (size_t)(i0 + std::min(i, b - 1));
            kr[i] = a.keys + row * d;
            vr[i] = a.values + row * d;
        }
    };
    fill_rows(0, std::min(B, n));

    for (int blk = 0; blk < blocks; ++blk) {
        const int i0 = blk * B, b = std::min(B, n - i0);
        const float* const* kr = x.krow.data() + (size_t)(blk % 2) * B;
        const float* const* vr = x.vrow.data() + (size_t)(blk % 2) * B;
        // The next block's rows are prefetched while this one is computed (one row of K per key scored,
        // one line of V per step of the value sweep), each in address order (row by row: 10-20% faster at
        // 1M than the order the kernels read in): the hardware prefetcher alone does not run far enough
        // ahead of this much arithmetic per byte, and the pass would alternate compute and stalls.
        const bool more = blk + 1 < blocks;
        if (more) fill_rows(blk + 1, b);
        const float* const* pk = more ? x.krow.data() + (size_t)((blk + 1) % 2) * B : nullptr;
        const float* const* pv = more ? x.vrow.data() + (size_t)((blk + 1) % 2) * B : nullptr;
        k.score(x.q.data(), gp, kr, b, d, a.scale, x.s.data(), B, pk);

        // ---- online softmax per member: new max, rescale the running sums, e = exp(s - max) ----
        for (int h = 0; h < g; ++h) {
            float* s = x.s.data() + (size_t)h * B;
            PartialAttention& p = parts[(size_t)h];
            if (!a.bias.empty()) {
                const float* bh = a.bias[(size_t)h] + i0;
                for (int i = 0; i < b; ++i) s[i] += bh[i];
            }
            if (a.scores) std::copy(s, s + b, a.scores + (size_t)h * n + i0);
            const float bm = lanes_max(s, b);
            float& mh = m[(size_t)h];
            if (bm > mh) {
                if (p.l > 0) {
                    const double f = std::exp((double)mh - bm);
                    p.l *= f;
                    for (double& v : p.acc) v *= f;
                }
                mh = bm;
            }
            if (mh == kNegInf)  // nothing of this member so far: all weights 0 (not exp(-inf + inf))
                std::fill(s, s + b, kNegInf);
            else
                for (int i = 0; i < b; ++i) s[i] -= mh;
            k.exp(s, b);
            p.l += lanes_sum(s, b);
            if (a.weights) {
                std::copy(s, s + b, a.weights + (size_t)h * n + i0);
                x.block_max[(size_t)h * blocks + blk] = mh;
            }
        }

        // ---- acc += e V: each value row read once for the group; folded into the double accumulators ----
        std::fill(x.acc.begin(), x.acc.end(), 0.0f);
        k.accumulate(x.s.data(), gp, vr, b, d, x.acc.data(), B, pv);
        for (int h = 0; h < g; ++h) {
            double* o = parts[(size_t)h].acc.data();
            const float* e = x.acc.data() + (size_t)h * d;
            for (int c = 0; c < d; ++c) o[c] += e[c];
        }
    }

    for (int h = 0; h < g; ++h) {
        PartialAttention& p = parts[(size_t)h];
        if (p.l > 0) p.m = m[(size_t)h];
        if (!a.weights) continue;
        // the block's e were relative to the running max then: weight = e * exp(max_then - max) / l
        float* w = a.weights + (size_t)h * n;
        for (int blk = 0; blk < blocks; ++blk) {
            const int i0 = blk * B, b = std::min(B, n - i0);
            const float mt = x.block_max[(size_t)h * blocks + blk];
            const float f = p.l > 0 && mt != kNegInf ? (float)(std::exp((double)mt - p.m) / p.l) : 0.0f;
            for (int i = 0; i < b; ++i) w[i0 + i] *= f;
        }
    }
}

}  // namespace retro
