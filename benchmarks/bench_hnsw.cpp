// The faiss_hnsw method's build (AnnIndex, lib/methods/faiss_methods.cpp) against FAISS's own
// IndexHNSWFlat on the same keys, side by side: the same graph algorithm (M 32, efConstruction 40, one
// thread, inner product), differing only in the storage's distances — Debian's libfaiss.a computes them
// with its scalar reference loop (one dependent add per coordinate; the x86-64 baseline build), AnnIndex
// with dot_f32 (eight independent sums, vectorized). Keys: n Gaussian rows of d = 64 (Qwen2.5-0.5B's
// head_dim), n = 4096 and 16384 (the closed loop's 16K grid indexes ~16K keys per head). Counter
// `keys_per_s`. docs/performance.md records a run.
#include <benchmark/benchmark.h>
#include <faiss/IndexHNSW.h>
#include <omp.h>

#include <numeric>
#include <random>
#include <vector>

#include "methods/faiss_methods.hpp"

namespace {

constexpr int kD = 64;

std::vector<float> gaussian_keys(int n) {
    std::mt19937 rng(11);
    std::normal_distribution<float> N(0.0f, 1.0f);
    std::vector<float> x((size_t)n * kD);
    for (auto& v : x) v = N(rng);
    return x;
}

void BM_HnswBuild_Faiss(benchmark::State& st) {
    const int n = (int)st.range(0);
    const auto x = gaussian_keys(n);
    omp_set_num_threads(1);
    for (auto _ : st) {
        faiss::IndexHNSWFlat h(kD, 32, faiss::METRIC_INNER_PRODUCT);
        h.hnsw.efConstruction = 40;
        h.add(n, x.data());
        benchmark::DoNotOptimize(h.hnsw.neighbors.data());
    }
    st.counters["keys_per_s"] = benchmark::Counter((double)n * st.iterations(), benchmark::Counter::kIsRate);
}

void BM_HnswBuild_AnnIndex(benchmark::State& st) {
    const int n = (int)st.range(0);
    const auto x = gaussian_keys(n);
    std::vector<int32_t> ids((size_t)n);
    std::iota(ids.begin(), ids.end(), 0);
    retro::AnnParams p;
    p.kind = retro::AnnKind::hnsw;
    for (auto _ : st) {
        retro::AnnIndex idx(kD, p);
        idx.build(x.data(), ids.data(), n);
        benchmark::DoNotOptimize(&idx);
    }
    st.counters["keys_per_s"] = benchmark::Counter((double)n * st.iterations(), benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_HnswBuild_Faiss)->Arg(4096)->Arg(16384)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_HnswBuild_AnnIndex)->Arg(4096)->Arg(16384)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK_MAIN();
