// The index builds that dominate the closed loop's method time at 16K-32K, at its shape. (1)
// RetrievalAttention's graph (build_roargraph, lib/cluster/roargraph.cpp): d = 64 (Qwen2.5-0.5B's
// head_dim), n keys, 7 query heads x n/16 training queries per graph (the 16K grid: ~16K keys, 7 x 1024
// prefill queries), RoarGraph's defaults (nq 100, M 35, build_L 500), one thread. Counters: keys_per_s,
// the step times (ms), and `adj_hash`, a hash of the adjacency lists — equal hashes across two builds of
// the code mean the same graph (a speed change must not change it).
// Also the exact top-k selection alone (exact_mips_knn, nq = 100). (2) CTKVR's qcIVF lists (the
// `ctkvr` method's build: 1024 centroid positions x 7 query heads scored against every key, softmax,
// max over the group, top rho = 2.5 x 1532) on a synthetic head, with `sel_hash` over the selections of
// 4 decode steps. (3) A layer's per-KV-head builds one by one on one core each (the GPU driver's host builds
// before 2026-11-29, BLAS-free there) against side by side through for_each_item (lib/core/threads, what the
// GPU path's build_method_heads and build_wave_heads do now): 8 KV heads of d = 128, pq's quantizer and codes
// (PqHead) or wave's index (WaveHead, CPU k-means), with `out_hash` over what they built — equal in both
// rows: the heads are the same whichever way they are built. (4) The same for the CPU-index methods' builds
// on the GPU path (kernels/run/host_index_layer.cpp): 8 KV heads of RetrievalAttention's RoarGraph or FAISS
// HNSW, one by one with each build's own threads against side by side, `sel_hash` over their selections.
// docs/performance.md records runs.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <memory>
#include <string_view>
#include <thread>
#include <vector>

#include "cluster/roargraph.hpp"
#include "methods/pq_head.hpp"
#include "methods/wave_head.hpp"
#include "core/hash.hpp"
#include "core/threads.hpp"
#include "method_harness.hpp"  // tests/unit: blob_head, make_method

namespace {

constexpr int kD = 64;

std::vector<float> gaussian(int rows, unsigned seed, float shift) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> N(0.0f, 1.0f);
    std::vector<float> x((size_t)rows * kD);
    for (size_t i = 0; i < x.size(); ++i) x[i] = N(rng) + (i % kD == 0 ? shift : 0.0f);
    return x;
}

/// FNV-1a (core/hash.hpp) over id lists, each with its length first, folded into h; 48 bits (a counter
/// is a double).
template <class Lists>
double lists_hash(const Lists& lists, uint64_t h = 1469598103934665603ull) {
    for (const auto& l : lists) {
        const uint64_t len = l.size();
        h = retro::fnv1a64(std::string_view((const char*)&len, sizeof len), h);
        h = retro::fnv1a64(std::string_view((const char*)l.data(), l.size() * sizeof(int32_t)), h);
    }
    return (double)(h % (1ull << 48));
}

void BM_RoarGraphBuild(benchmark::State& st) {
    const int n = (int)st.range(0), m = 7 * (n / 16);
    // queries shifted off the keys' distribution (attention queries are out-of-distribution)
    const auto keys = gaussian(n, 11, 0.0f), queries = gaussian(m, 12, 2.0f);
    retro::set_compute_threads(1);
    retro::set_blas_threads(1);
    retro::RoarGraphParams p;
    p.threads = 1;
    retro::RoarGraph g;
    for (auto _ : st) {
        g = retro::build_roargraph(keys.data(), n, kD, queries.data(), m, p);
        benchmark::DoNotOptimize(g.adj.data());
    }
    st.counters["keys_per_s"] = benchmark::Counter((double)n * st.iterations(), benchmark::Counter::kIsRate);
    st.counters["knn_ms"] = g.ms_knn;
    st.counters["projection_ms"] = g.ms_projection;
    st.counters["enhance_ms"] = g.ms_enhance;
    const uint64_t entry = (uint64_t)g.entry;
    st.counters["adj_hash"] = lists_hash(g.adj, retro::fnv1a64(std::string_view((const char*)&entry, sizeof entry)));
}

void BM_ExactMipsKnn(benchmark::State& st) {
    const int n = (int)st.range(0), m = 1024;
    const auto keys = gaussian(n, 11, 0.0f), queries = gaussian(m, 12, 2.0f);
    retro::set_blas_threads(1);
    for (auto _ : st) {
        auto knn = retro::exact_mips_knn(keys.data(), n, kD, queries.data(), m, 100);
        benchmark::DoNotOptimize(knn.data());
    }
    st.counters["queries_per_s"] = benchmark::Counter((double)m * st.iterations(), benchmark::Counter::kIsRate);
}

void BM_CtkvrBuild(benchmark::State& st) {
    const int n = (int)st.range(0);
    using namespace retro::method_test;
    const retro::HeadSlice h = blob_head({.prompt_len = n, .steps = 4, .d = kD, .group = 7, .seed = 5,
                                          .centers = 0, .query_scale = 2.0f, .prefill = 1024});
    retro::set_blas_threads(1);
    const nlohmann::json params = {{"C", 1024}, {"rho_prime", 1532}, {"sink", 4}, {"window", 64}};
    auto m = make_method("ctkvr", params);
    for (auto _ : st) m->build(context_of(h), retro::KVView{h.keys.data(), h.values.data(), h.prompt_len, kD});
    std::vector<std::vector<int32_t>> sels;  // every step's per-query-head selections, in order
    for (const auto& s : replay(*m, h, "ctkvr", {10}, 0, true).sels)
        sels.insert(sels.end(), s.exact.begin(), s.exact.end());
    st.counters["sel_hash"] = lists_hash(sels);
}

// args: n keys per head, kind (0 pq, 1 wave), threads (1: one by one; 0: side by side on every core)
void BM_HeadBuilds(benchmark::State& st) {
    const int n = (int)st.range(0), kind = (int)st.range(1), threads = (int)st.range(2), heads = 8, d = 128;
    using namespace retro::method_test;
    std::vector<retro::HeadSlice> hs;
    for (int h = 0; h < heads; ++h)
        hs.push_back(blob_head({.prompt_len = n, .steps = 1, .d = d, .group = 4, .seed = 40u + (unsigned)h, .centers = 64}));
    retro::set_compute_threads(1);  // one core per head either way: the comparison is the side by side
    double hash = 0;
    for (auto _ : st) {
        uint64_t h = 1469598103934665603ull;
        if (kind == 0) {
            std::vector<retro::PqHead> built(heads, retro::PqHead(retro::PqHeadParams{}));
            retro::for_each_item(heads, threads, [&](int i) {
                built[(size_t)i].build(context_of(hs[(size_t)i]), {hs[(size_t)i].keys.data(), hs[(size_t)i].values.data(), n, d});
            });
            for (const retro::PqHead& b : built)
                h = retro::fnv1a64(std::string_view((const char*)b.codes().data(), b.codes().size() * 2), h);
        } else {
            std::vector<retro::WaveHead> built;
            for (int i = 0; i < heads; ++i) built.emplace_back(retro::WaveParams{}, 0, i);
            retro::for_each_item(heads, threads, [&](int i) {
                built[(size_t)i].build({hs[(size_t)i].keys.data(), hs[(size_t)i].values.data(), n, d});
            });
            for (const retro::WaveHead& b : built)
                for (int c : b.nonempty()) {
                    const auto m = b.index().members(c);
                    h = retro::fnv1a64(std::string_view((const char*)m.data(), m.size() * sizeof(int32_t)), h);
                }
        }
        hash = (double)(h % (1ull << 48));
    }
    st.counters["out_hash"] = hash;
    st.counters["heads_per_s"] = benchmark::Counter((double)heads * st.iterations(), benchmark::Counter::kIsRate);
}

// args: n keys per head, kind (0 retrieval_attention: RoarGraph; 1 faiss_hnsw), threads (1: one by one, each build
// with the method's own OpenMP team on every core — the GPU path's host-index builds before 2026-11-30; 0: side
// by side through for_each_item, one core each — what build_instances in kernels/run/host_index_layer.cpp does now)
void BM_HostIndexBuilds(benchmark::State& st) {
    const int n = (int)st.range(0), kind = (int)st.range(1), threads = (int)st.range(2), heads = 8, d = 128;
    using namespace retro::method_test;
    const char* name = kind == 0 ? "retrieval_attention" : "faiss_hnsw";
    const nlohmann::json params = {{"k", 1532}, {"sink", 4}, {"window", 64}};
    std::vector<retro::HeadSlice> hs;
    for (int h = 0; h < heads; ++h)
        hs.push_back(blob_head({.prompt_len = n, .steps = 2, .d = d, .group = 4, .seed = 40u + (unsigned)h,
                                .centers = 64, .query_scale = 2.0f, .prefill = n / 16}));
    retro::set_compute_threads((int)std::thread::hardware_concurrency());  // BM_HeadBuilds held it at one
    double hash = 0;
    for (auto _ : st) {
        std::vector<std::unique_ptr<retro::Method>> built;
        for (int h = 0; h < heads; ++h) built.push_back(make_method(name, params));
        retro::for_each_item(heads, threads, [&](int i) {
            built[(size_t)i]->build(context_of(hs[(size_t)i]), {hs[(size_t)i].keys.data(), hs[(size_t)i].values.data(), n, d});
        });
        st.PauseTiming();
        std::vector<std::vector<int32_t>> sels;  // every head's selections over its 2 decode steps, in order
        for (int h = 0; h < heads; ++h)
            for (const auto& sel : replay(*built[(size_t)h], hs[(size_t)h], name, {10}, 0, true).sels)
                sels.insert(sels.end(), sel.exact.begin(), sel.exact.end());
        hash = lists_hash(sels);
        st.ResumeTiming();
    }
    st.counters["sel_hash"] = hash;
    st.counters["heads_per_s"] = benchmark::Counter((double)heads * st.iterations(), benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_HostIndexBuilds)->ArgsProduct({{8192}, {0, 1}, {1, 0}})->ArgNames({"n", "kind", "threads"})
    ->Unit(benchmark::kMillisecond)->Iterations(1)->Repetitions(3);
BENCHMARK(BM_HeadBuilds)->ArgsProduct({{32768}, {0, 1}, {1, 0}})->ArgNames({"n", "kind", "threads"})
    ->Unit(benchmark::kMillisecond)->Iterations(1)->Repetitions(3);
BENCHMARK(BM_CtkvrBuild)->Arg(16384)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_ExactMipsKnn)->Arg(16384)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_RoarGraphBuild)->Arg(4096)->Arg(16384)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK_MAIN();
