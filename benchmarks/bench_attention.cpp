// Exact attention over one head (the evaluator's reference path) at 32K and 128K tokens, d=128.
// Reports bytes/s of K+V read (float32); compare with the machine's memory bandwidth
// (bench_membw below measures a streaming read of the same size). See docs/performance.md.
// BM_GroupFullAttention: full attention per decode step for a GQA group of 4 query heads, the per-head
// path (each head reads K and V: what the evaluator did before issue 17) against the GQA-aware paths (two
// sgemm, then the fused single-pass kernel of lib/attention/group_flash), at 128K and 1M tokens.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <span>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "attention/group_attention.hpp"
#include "attention/group_flash_kernels.hpp"
#include "core/serial_blas.hpp"

namespace {
struct Head {
    int n, d;
    std::vector<float> q, k, v;
    Head(int n_, int d_, int g = 1) : n(n_), d(d_), q((size_t)g * d_), k((size_t)n_ * d_), v((size_t)n_ * d_) {
        std::mt19937 rng(7);
        std::normal_distribution<float> N(0, 1);
        for (auto& e : q) e = N(rng);
        for (auto& e : k) e = N(rng);
        for (auto& e : v) e = N(rng);
    }
};

void BM_ExactAttention(benchmark::State& st) {
    const int n = (int)st.range(0), d = 128;
    Head h(n, d);
    std::vector<float> out(d), scratch;
    for (auto _ : st) {
        double lse = retro::exact_attention(h.q.data(), h.k.data(), h.v.data(), n, d,
                                            1.0f / std::sqrt((float)d), out.data(), scratch);
        benchmark::DoNotOptimize(lse);
        benchmark::DoNotOptimize(out.data());
    }
    st.SetBytesProcessed((int64_t)st.iterations() * 2 * (int64_t)n * d * 4);
}
BENCHMARK(BM_ExactAttention)->Arg(32768)->Arg(131072)->Unit(benchmark::kMicrosecond);

// The group path before the fused kernel (kept here as the baseline): scores [g, n] = Q K^T (sgemm),
// softmax of each row, out = W V (sgemm); K and V read once for the group, with a [g, n] buffer between.
void sgemm_group_attention(const Head& h, int g, float scale, std::vector<float>& w, float* out, double* lse) {
    w.resize((size_t)g * h.n);
    retro::group_attention_scores(h.q.data(), g, h.k.data(), h.n, h.d, scale, w.data());
    for (int j = 0; j < g; ++j) lse[j] = retro::softmax_inplace(w.data() + (size_t)j * h.n, h.n);
    const retro::SerialBlas serial;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g, h.d, h.n, 1.0f, w.data(), h.n, h.v.data(), h.d, 0.0f,
                out, h.d);
}

// The fused kernel's block loops in two streaming passes instead of one (scores of all n tokens from K,
// the softmax of the [g, n] rows, then W V from V), to compare with the single pass of
// group_exact_attention. g % 4 == 0, d % 16 == 0 on an AVX2 CPU (else the portable kernels).
void two_pass_group_attention(const Head& h, int g, float scale, std::vector<float>& s, std::vector<float>& w,
                              float* out, double* lse) {
    namespace f = retro::flash;
    const f::Kernels& k = f::kernels_for(h.d);
    const int n = h.n, d = h.d, B = retro::kFlashBlock;
    s.resize((size_t)g * n);
    w.resize((size_t)g * n);
    std::vector<const float*> rows((size_t)B);
    for (int i0 = 0; i0 < n; i0 += B) {
        const int b = std::min(B, n - i0);
        for (int i = 0; i < b; ++i) rows[(size_t)i] = h.k.data() + (size_t)(i0 + i) * d;
        k.score(h.q.data(), g, rows.data(), b, d, scale, s.data() + i0, n, nullptr);
    }
    std::copy(s.begin(), s.end(), w.begin());
    std::vector<double> l((size_t)g);
    for (int j = 0; j < g; ++j) {
        float* r = w.data() + (size_t)j * n;
        const float m = *std::max_element(r, r + n);
        for (int i = 0; i < n; ++i) r[i] -= m;
        k.exp(r, n);
        double sum = 0;
        for (int i = 0; i < n; ++i) sum += r[i];
        l[(size_t)j] = sum;
        lse[j] = m + std::log(sum);
    }
    std::vector<float> acc((size_t)g * d, 0.0f);
    for (int i0 = 0; i0 < n; i0 += B) {
        const int b = std::min(B, n - i0);
        for (int i = 0; i < b; ++i) rows[(size_t)i] = h.v.data() + (size_t)(i0 + i) * d;
        k.accumulate(w.data() + i0, g, rows.data(), b, d, acc.data(), n, nullptr);
    }
    for (int j = 0; j < g; ++j)
        for (int c = 0; c < d; ++c) out[(size_t)j * d + c] = (float)(acc[(size_t)j * d + c] / l[(size_t)j]);
}

// Full attention per decode step for a GQA group of 4, the per-head path against the group paths, side
// by side in one run. (a) attention over a full selection (the `full` method, selection_output):
// 0 per head (partial_attention_ids x 4, before issue 17), 1 sgemm group (the path before the fused kernel),
// 2 fused (group_partial_attention, shared contiguous list). (b) the evaluator's exact reference with its
// [4, n] scores and weights (prepare_step): 3 per head (exact_attention x 4), 4 sgemm group, 5 fused single
// pass (group_exact_attention), 6 the fused kernels in two streaming passes.
void BM_GroupFullAttention(benchmark::State& st) {
    const int n = (int)st.range(0), variant = (int)st.range(1), d = 128, g = 4;
    // one K/V per size, kept across variants (--benchmark_enable_random_interleaving runs them in any order)
    static std::map<int, std::unique_ptr<Head>> heads;
    std::unique_ptr<Head>& h = heads[n];
    if (!h) h = std::make_unique<Head>(n, d, g);
    const float scale = 1.0f / std::sqrt((float)d);
    std::vector<int32_t> ids((size_t)n);
    std::iota(ids.begin(), ids.end(), 0);
    std::vector<std::span<const int32_t>> lists(g, ids);
    retro::GroupScratch scratch;
    std::vector<float> out((size_t)g * d), s((size_t)g * n), w((size_t)g * n);
    std::vector<double> lse(g);
    std::vector<std::vector<float>> a(g);
    for (auto _ : st) {
        if (variant == 0) {
            for (int j = 0; j < g; ++j) {
                auto p = retro::partial_attention_ids(h->q.data() + (size_t)j * d, h->k.data(), h->v.data(), ids, d, scale);
                p.output(out.data() + (size_t)j * d);
            }
        } else if (variant == 1 || variant == 4) {
            sgemm_group_attention(*h, g, scale, w, out.data(), lse.data());
        } else if (variant == 2) {
            auto parts = retro::group_partial_attention(h->q.data(), g, h->k.data(), h->v.data(), d, scale, lists, {},
                                                        scratch);
            for (int j = 0; j < g; ++j) parts[(size_t)j].output(out.data() + (size_t)j * d);
        } else if (variant == 3) {
            for (int j = 0; j < g; ++j)
                lse[(size_t)j] = retro::exact_attention(h->q.data() + (size_t)j * d, h->k.data(), h->v.data(), n, d,
                                                        scale, out.data() + (size_t)j * d, a[(size_t)j]);
        } else if (variant == 5) {
            retro::group_exact_attention(h->q.data(), g, h->k.data(), h->v.data(), n, d, scale, s.data(), w.data(),
                                         out.data(), lse.data(), scratch.flash);
        } else {
            two_pass_group_attention(*h, g, scale, s, w, out.data(), lse.data());
        }
        benchmark::DoNotOptimize(out.data());
    }
    static const char* names[] = {"attend: per head",    "attend: sgemm group", "attend: fused",
                                  "reference: per head", "reference: sgemm group", "reference: fused",
                                  "reference: fused two-pass"};
    st.SetLabel(std::string(names[variant]) + " [" + retro::group_flash_kernel_name(d) + "]");
    st.SetBytesProcessed((int64_t)st.iterations() * 2 * (int64_t)n * d * 4);
}
BENCHMARK(BM_GroupFullAttention)
    ->Apply([](benchmark::internal::Benchmark* b) {
        for (int n : {131072, 1048576})
            for (int variant = 0; variant <= 6; ++variant) b->Args({n, variant});
    })
    ->Unit(benchmark::kMillisecond)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->UseRealTime();

// Streaming read of 2*n*d floats (K and V): the memory roofline for the exact path.
void BM_StreamRead(benchmark::State& st) {
    const int n = (int)st.range(0), d = 128;
    Head h(n, d);
    for (auto _ : st) {
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t i = 0; i < h.k.size(); i += 4) {
            s0 += h.k[i]; s1 += h.k[i + 1]; s2 += h.k[i + 2]; s3 += h.k[i + 3];
        }
        for (size_t i = 0; i < h.v.size(); i += 4) {
            s0 += h.v[i]; s1 += h.v[i + 1]; s2 += h.v[i + 2]; s3 += h.v[i + 3];
        }
        float s = s0 + s1 + s2 + s3;
        benchmark::DoNotOptimize(s);
    }
    st.SetBytesProcessed((int64_t)st.iterations() * 2 * (int64_t)n * d * 4);
}
BENCHMARK(BM_StreamRead)->Arg(32768)->Arg(131072)->Unit(benchmark::kMicrosecond);
}  // namespace

BENCHMARK_MAIN();
