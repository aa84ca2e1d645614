// Exact attention over one head (the evaluator's reference path) at 32K and 128K tokens, d=128.
// Reports bytes/s of K+V read (float32); compare with the machine's memory bandwidth
// (bench_membw below measures a streaming read of the same size). See docs/performance.md.
#include <benchmark/benchmark.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "attention/attention.hpp"

namespace {
struct Head {
    int n, d;
    std::vector<float> q, k, v;
    Head(int n_, int d_) : n(n_), d(d_), q(d_), k((size_t)n_ * d_), v((size_t)n_ * d_) {
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
