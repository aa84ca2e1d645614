// Exact attention over one head (the evaluator's reference path) at 32K and 128K tokens, d=128.
// Reports bytes/s of K+V read (float32); compare with the machine's memory bandwidth
// (bench_membw below measures a streaming read of the same size). See docs/performance.md.
// BM_GroupFullAttention: full attention per decode step for a GQA group of 4 query heads, the per-head
// path (each head reads K and V: what the evaluator did before issue 17) against the GQA-aware path
// (lib/attention/group_attention: one pass over K and V for the group), at 128K and 1M tokens.
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <numeric>
#include <span>
#include <random>
#include <vector>

#include "attention/attention.hpp"
#include "attention/group_attention.hpp"

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

// Variant 0: per head, partial_attention_ids over all tokens for each of the 4 heads (the evaluator's
// attention over a `full` selection before issue 17); 1: group_partial_attention (shared list, one pass);
// 2: per-head exact reference (exact_attention x 4, the evaluator's prepare_step before); 3: the group
// reference (group_attention_scores + group_softmax_output, prepare_step now).
void BM_GroupFullAttention(benchmark::State& st) {
    const int n = (int)st.range(0), variant = (int)st.range(1), d = 128, g = 4;
    static std::unique_ptr<Head> h;
    if (!h || h->n != n) {
        h.reset();
        h = std::make_unique<Head>(n, d, g);
    }
    const float scale = 1.0f / std::sqrt((float)d);
    std::vector<int32_t> ids((size_t)n);
    std::iota(ids.begin(), ids.end(), 0);
    std::vector<std::span<const int32_t>> lists(g, ids);
    retro::GroupScratch scratch;
    std::vector<float> out((size_t)g * d), w;
    std::vector<double> lse(g);
    std::vector<std::vector<float>> a(g);
    for (auto _ : st) {
        if (variant == 0) {
            for (int j = 0; j < g; ++j) {
                auto p = retro::partial_attention_ids(h->q.data() + (size_t)j * d, h->k.data(), h->v.data(), ids, d, scale);
                p.output(out.data() + (size_t)j * d);
            }
        } else if (variant == 1) {
            auto parts = retro::group_partial_attention(h->q.data(), g, h->k.data(), h->v.data(), d, scale, lists, {},
                                                        scratch);
            for (int j = 0; j < g; ++j) parts[(size_t)j].output(out.data() + (size_t)j * d);
        } else if (variant == 2) {
            for (int j = 0; j < g; ++j)
                lse[(size_t)j] = retro::exact_attention(h->q.data() + (size_t)j * d, h->k.data(), h->v.data(), n, d,
                                                        scale, out.data() + (size_t)j * d, a[(size_t)j]);
        } else {
            w.resize((size_t)g * n);
            retro::group_attention_scores(h->q.data(), g, h->k.data(), n, d, scale, w.data());
            retro::group_softmax_output(w.data(), g, n, h->v.data(), d, out.data(), lse.data());
        }
        benchmark::DoNotOptimize(out.data());
    }
    static const char* names[] = {"per-head attend", "group attend", "per-head reference", "group reference"};
    st.SetLabel(names[variant]);
    st.SetBytesProcessed((int64_t)st.iterations() * 2 * (int64_t)n * d * 4);
}
BENCHMARK(BM_GroupFullAttention)
    ->ArgsProduct({{131072, 1048576}, {0, 1, 2, 3}})
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
