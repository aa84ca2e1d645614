// Build cost of the wave index: segmented spherical k-means (lib/cluster/kmeans) for one head at 32K and
// 128K keys (d = 128, 16 keys per cluster, 10 iterations), side by side with FAISS's k-means
// (faiss::Clustering, spherical, IndexFlatIP, same k and iterations) on the same keys, globally and on
// the same 8K segments. Each run also reports the index quality as recall@100: for 64 queries, the
// fraction of the true top-100 keys (by q.k) inside the top 1.8% clusters ranked by q.centroid (the
// mean of each cluster's keys). See docs/performance.md.
//
// Keys: a synthetic head with what makes real keys hard and segmentable: a large shared mean, topics
// whose mix drifts along the sequence (coarse spatial locality), within-topic noise; queries are
// topic directions without the mean (out of distribution).
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cluster/kmeans.hpp"

namespace {

constexpr int kDim = 128;
constexpr int kQueries = 64;
constexpr double kRetrieval = 0.018;

struct Head {
    int n = 0;
    std::vector<float> keys;     // [n, d]
    std::vector<float> centered; // [n, d] keys minus their mean (what FAISS gets, as our k-means)
    std::vector<float> queries;  // [kQueries, d]
    std::vector<std::vector<int>> top100;  // per query, the true top-100 key ids
};

const Head& head(int n) {
    static std::map<int, Head> cache;
    auto it = cache.find(n);
    if (it != cache.end()) return it->second;
    Head h;
    h.n = n;
    const int d = kDim, topics = 1024;
    std::mt19937 rng(12345);
    std::normal_distribution<float> N(0.0f, 1.0f);
    std::vector<float> mu((size_t)d), tp((size_t)topics * d);
    for (auto& v : mu) v = 2.0f * N(rng);
    for (auto& v : tp) v = 0.5f * N(rng);
    h.keys.resize((size_t)n * d);
    int pos = 0;
    while (pos < n) {
        // a chunk of 32..512 tokens mixes 4 topics from a window that drifts with the position
        const int len = std::min(n - pos, 32 + (int)(rng() % 481));
        const int base = (int)((long)pos * 40 / 8192);  // ~40 new topics every 8K tokens
        int pick[4];
        for (int& p : pick) p = (base + (int)(rng() % 96)) % topics;
        for (int i = pos; i < pos + len; ++i) {
            const float* t = tp.data() + (size_t)pick[rng() % 4] * d;
            for (int e = 0; e < d; ++e) h.keys[(size_t)i * d + e] = mu[e] + t[e] + 0.45f * N(rng);
        }
        pos += len;
    }
    std::vector<double> mean((size_t)d, 0.0);
    for (int i = 0; i < n; ++i)
        for (int e = 0; e < d; ++e) mean[e] += h.keys[(size_t)i * d + e];
    h.centered.resize(h.keys.size());
    for (int i = 0; i < n; ++i)
        for (int e = 0; e < d; ++e)
            h.centered[(size_t)i * d + e] = h.keys[(size_t)i * d + e] - (float)(mean[e] / n);
    h.queries.resize((size_t)kQueries * d);
    for (int q = 0; q < kQueries; ++q) {
        const int topic = (int)(rng() % (unsigned)std::min(topics, n * 40 / 8192 + 96));
        for (int e = 0; e < d; ++e) h.queries[(size_t)q * d + e] = 4.0f * tp[(size_t)topic * d + e] + 0.5f * N(rng);
    }
    std::vector<float> s((size_t)n);
    for (int q = 0; q < kQueries; ++q) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n, d, 1.0f, h.keys.data(), d, h.queries.data() + (size_t)q * d,
                    1, 0.0f, s.data(), 1);
        std::vector<int> ids((size_t)n);
        std::iota(ids.begin(), ids.end(), 0);
        std::partial_sort(ids.begin(), ids.begin() + 100, ids.end(), [&](int a, int b) { return s[a] > s[b]; });
        ids.resize(100);
        h.top100.push_back(ids);
    }
    return cache.emplace(n, std::move(h)).first->second;
}

// recall@100 of retrieving the top 1.8% clusters by q . (mean of the cluster's keys).
double recall100(const Head& h, const std::vector<int32_t>& assign, int k) {
    const int d = kDim;
    std::vector<double> sum((size_t)k * d, 0.0);
    std::vector<int> cnt((size_t)k, 0);
    for (int i = 0; i < h.n; ++i) {
        ++cnt[(size_t)assign[(size_t)i]];
        for (int e = 0; e < d; ++e) sum[(size_t)assign[(size_t)i] * d + e] += h.keys[(size_t)i * d + e];
    }
    std::vector<float> cent((size_t)k * d);
    for (int j = 0; j < k; ++j)
        for (int e = 0; e < d; ++e) cent[(size_t)j * d + e] = cnt[j] ? (float)(sum[(size_t)j * d + e] / cnt[j]) : 0;
    const int r = std::max(1, (int)std::lround(kRetrieval * k));
    double total = 0;
    std::vector<float> s((size_t)k);
    for (int q = 0; q < kQueries; ++q) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, k, d, 1.0f, cent.data(), d, h.queries.data() + (size_t)q * d, 1,
                    0.0f, s.data(), 1);
        for (int j = 0; j < k; ++j)
            if (!cnt[j]) s[j] = -INFINITY;
        std::vector<int> ids((size_t)k);
        std::iota(ids.begin(), ids.end(), 0);
        std::partial_sort(ids.begin(), ids.begin() + r, ids.end(), [&](int a, int b) { return s[a] > s[b]; });
        std::vector<char> chosen((size_t)k, 0);
        for (int i = 0; i < r; ++i) chosen[(size_t)ids[i]] = 1;
        int hit = 0;
        for (int t : h.top100[(size_t)q]) hit += chosen[(size_t)assign[(size_t)t]];
        total += hit / 100.0;
    }
    return total / kQueries;
}

// Variant 0: global (segment = all keys); 1: 8K segments + final global assignment (the public code);
// 2: 8K segments, final assignment within the segment (pure segmented, final_assign none); 3: 8K
// segments + final assignment over the own and neighbouring segments (final_assign local, radius 1); 4: 8K
// segments + final assignment over the own segment and 4 of sqrt(k) coarse lists (final_assign probe). Third argument:
// normalize_init (0 = the public code's raw-key initial centroids, 1 = normalized as FAISS).
void BM_WaveKMeans(benchmark::State& st) {
    const Head& h = head((int)st.range(0));
    const int variant = (int)st.range(1);
    retro::KMeansParams p;
    p.segment = variant == 0 ? 0 : 8192;
    p.final_assign = variant == 1   ? retro::FinalAssign::global
                     : variant == 3 ? retro::FinalAssign::local
                     : variant == 4 ? retro::FinalAssign::probe
                                    : retro::FinalAssign::none;
    p.normalize_init = st.range(2) != 0;
    retro::KMeansResult r;
    for (auto _ : st) {
        r = retro::segmented_kmeans(h.keys.data(), h.n, kDim, p);
        benchmark::DoNotOptimize(r.assign.data());
    }
    st.SetLabel(std::string(variant == 0   ? "global"
                            : variant == 1 ? "seg8k+global_assign"
                            : variant == 3 ? "seg8k+local_assign"
                            : variant == 4 ? "seg8k+probe_assign"
                                           : "seg8k") +
                (p.normalize_init ? " norm_init" : ""));
    st.counters["k"] = r.k;
    st.counters["segments"] = r.plan.segments();
    st.counters["recall@100"] = recall100(h, r.assign, r.k);
    st.counters["empty"] = (double)std::count(r.sizes.begin(), r.sizes.end(), 0);
    st.counters["passes"] = (double)r.segment_passes;  // within-segment passes run (segments * 9 at most)
}
BENCHMARK(BM_WaveKMeans)
    ->ArgsProduct({{32768, 131072}, {0, 1, 2, 3}, {0, 1}})
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();

// Issue 17: the build's growth with the context for each final assignment (1 = global, the public code;
// 2 = none; 3 = local; 4 = probe, the wave default) at 128K and 1M keys; one iteration each (the global pass at 1M is
// over a minute). Run with OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 for single-core CPU times.
void BM_WaveKMeansScale(benchmark::State& st) { BM_WaveKMeans(st); }
BENCHMARK(BM_WaveKMeansScale)
    ->ArgsProduct({{131072, 1048576}, {3, 4, 2, 1}, {0}})
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();

// FAISS on the same (centered) keys: variant 0 global, 1 the same 8K segments one after another (FAISS
// parallelizes inside each), k and iterations as ours.
void BM_FaissKMeans(benchmark::State& st) {
    const Head& h = head((int)st.range(0));
    const int variant = (int)st.range(1);
    retro::KMeansParams p;
    p.segment = variant == 0 ? 0 : 8192;
    const retro::KMeansPlan plan = retro::kmeans_plan(h.n, p);
    std::vector<int32_t> assign((size_t)h.n);
    for (auto _ : st) {
        for (int s = 0; s < plan.segments(); ++s) {
            const int r0 = plan.row_begin[s], ns = plan.row_begin[s + 1] - r0;
            const int c0 = plan.cluster_begin[s], ks = plan.cluster_begin[s + 1] - c0;
            faiss::ClusteringParameters cp;
            cp.niter = 10;
            cp.spherical = true;
            cp.verbose = false;
            cp.min_points_per_centroid = 1;
            cp.max_points_per_centroid = 1 << 30;
            cp.seed = 1234;
            faiss::Clustering clus(kDim, ks, cp);
            faiss::IndexFlatIP index(kDim);
            clus.train(ns, h.centered.data() + (size_t)r0 * kDim, index);
            st.PauseTiming();  // assignment for the recall only (index holds the final centroids)
            std::vector<float> D((size_t)ns);
            std::vector<faiss::Index::idx_t> I((size_t)ns);
            index.search(ns, h.centered.data() + (size_t)r0 * kDim, 1, D.data(), I.data());
            for (int i = 0; i < ns; ++i) assign[(size_t)(r0 + i)] = c0 + (int32_t)I[(size_t)i];
            st.ResumeTiming();
        }
    }
    st.SetLabel(variant == 0 ? "faiss global" : "faiss seg8k");
    st.counters["k"] = plan.k;
    st.counters["segments"] = plan.segments();
    st.counters["recall@100"] = recall100(h, assign, plan.k);
    std::vector<int> sizes((size_t)plan.k, 0);
    for (int32_t a : assign) ++sizes[(size_t)a];
    st.counters["empty"] = (double)std::count(sizes.begin(), sizes.end(), 0);
}
BENCHMARK(BM_FaissKMeans)
    ->ArgsProduct({{32768, 131072}, {0, 1}})
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
