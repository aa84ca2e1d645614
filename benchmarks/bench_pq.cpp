// PQCache's product quantizer (lib/cluster/pq) against faiss::ProductQuantizer on the same keys: the
// middle tokens' keys of one head of the synthetic Llama-3-8B-shaped trace (what the `pq` method trains
// on: prompt keys minus 4 initial and 64 local tokens, d = 128), m = 2 / b = 6 and m = 4 / b = 8, 10 and 25
// Lloyd iterations, one thread each (FAISS's OpenMP and OpenBLAS set to 1). Counters:
//   build_ms   train + encode of all the rows (wall time, the benchmark's own time is the same)
//   mse        mean squared reconstruction error per coordinate, relative to the keys' variance (rel_mse)
//   recall     mean over the head's decode queries of |exact top-100 ∩ PQ top-522| / 100, ranking by the
//              asymmetric score q·k̂ (the `pq` method's 1.8% budget), the retrieval quality that matters
// FAISS subsamples k-means training to 256 rows per centroid by default (16384 rows for b = 6);
// `faiss_all` lifts that cap so both see every row. docs/methods/pq.md records a run.
//
// Trace: $RETRO_PQ_TRACE or datasets/generated/synth-llama3-32k-l1.h5 (run from the repository root;
// `retro-bench run configs/paper/baselines.json` generates it). KV head: $RETRO_PQ_HEAD (default 0).
#include <benchmark/benchmark.h>
#include <faiss/impl/ProductQuantizer.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "cluster/pq.hpp"
#include "core/host.hpp"
#include "trace/reader.hpp"

namespace {

constexpr int kSink = 4, kWindow = 64, kTop = 100, kBudget = 522;

struct Data {
    int n = 0, d = 0, nq = 0;
    std::vector<float> x;        // [n, d] middle keys
    std::vector<float> q;        // [nq, d] decode queries of the group
    std::vector<std::vector<int>> truth;  // per query, exact top-kTop row ids
    double var = 0;              // mean squared deviation of the coordinates from their mean
    std::string error;
};

const Data& data() {
    static std::unique_ptr<Data> D;
    if (D) return *D;
    D = std::make_unique<Data>();
    const char* env = std::getenv("RETRO_PQ_TRACE");
    const std::string path = env ? env : "datasets/generated/synth-llama3-32k-l1.h5";
    const char* he = std::getenv("RETRO_PQ_HEAD");
    try {
        retro::TraceReader r(path);
        retro::ReadOptions ro;
        ro.prefill_queries = false;
        const retro::HeadSlice s = r.read_head(0, he ? std::atoi(he) : 0, ro);
        const int d = s.head_dim, n = s.prompt_len - kSink - kWindow;
        D->d = d;
        D->n = n;
        D->x.assign(s.key(kSink), s.key(kSink) + (size_t)n * d);
        D->nq = s.group * s.num_steps;
        D->q.assign(s.queries.begin(), s.queries.end());
        std::vector<double> mean((size_t)d, 0.0);
        for (int i = 0; i < n; ++i)
            for (int e = 0; e < d; ++e) mean[(size_t)e] += D->x[(size_t)i * d + e] / n;
        for (int i = 0; i < n; ++i)
            for (int e = 0; e < d; ++e) {
                const double v = D->x[(size_t)i * d + e] - mean[(size_t)e];
                D->var += v * v / ((double)n * d);
            }
        for (int j = 0; j < D->nq; ++j) {
            std::vector<float> sc((size_t)n);
            for (int i = 0; i < n; ++i) {
                float v = 0;
                for (int e = 0; e < d; ++e) v += D->q[(size_t)j * d + e] * D->x[(size_t)i * d + e];
                sc[(size_t)i] = v;
            }
            std::vector<int> id((size_t)n);
            std::iota(id.begin(), id.end(), 0);
            std::partial_sort(id.begin(), id.begin() + kTop, id.end(), [&](int a, int b) { return sc[a] > sc[b]; });
            id.resize(kTop);
            D->truth.push_back(id);
        }
    } catch (const std::exception& e) {
        D->error = std::string(path) + ": " + e.what();
    }
    return *D;
}

// Fills rel_mse and recall from reconstructions y: [n, d].
void quality(benchmark::State& st, const Data& D, const std::vector<float>& y) {
    double err = 0;
    for (size_t i = 0; i < D.x.size(); ++i) err += (double)(D.x[i] - y[i]) * (D.x[i] - y[i]);
    st.counters["rel_mse"] = err / (double)D.x.size() / D.var;
    double rec = 0;
    std::vector<float> sc((size_t)D.n);
    std::vector<int> id((size_t)D.n);
    for (int j = 0; j < D.nq; ++j) {
        const float* q = D.q.data() + (size_t)j * D.d;
        for (int i = 0; i < D.n; ++i) {
            float v = 0;
            for (int e = 0; e < D.d; ++e) v += q[e] * y[(size_t)i * D.d + e];
            sc[(size_t)i] = v;
        }
        std::iota(id.begin(), id.end(), 0);
        std::partial_sort(id.begin(), id.begin() + kBudget, id.end(), [&](int a, int b) { return sc[a] > sc[b]; });
        std::vector<int> got(id.begin(), id.begin() + kBudget), want = D.truth[(size_t)j];
        std::sort(got.begin(), got.end());
        std::sort(want.begin(), want.end());
        std::vector<int> both;
        std::set_intersection(got.begin(), got.end(), want.begin(), want.end(), std::back_inserter(both));
        rec += (double)both.size() / kTop / D.nq;
    }
    st.counters["recall"] = rec;
}

// args: m, nbits, iters; impl: 0 ours, 1 FAISS default, 2 FAISS on every row
void BM_PQ(benchmark::State& st, int impl) {
    const Data& D = data();
    if (!D.error.empty()) {
        st.SkipWithError(D.error.c_str());
        return;
    }
    const int m = (int)st.range(0), nbits = (int)st.range(1), iters = (int)st.range(2);
    omp_set_num_threads(1);
    retro::set_blas_threads(1);
    std::vector<float> y((size_t)D.n * D.d);
    for (auto _ : st) {
        const auto t0 = std::chrono::steady_clock::now();
        if (impl == 0) {
            retro::ProductQuantizer pq(D.d, retro::PQParams{.m = m, .nbits = nbits, .iters = iters});
            pq.train(D.x.data(), D.n);
            std::vector<uint16_t> codes((size_t)D.n * m);
            pq.encode(D.x.data(), D.n, codes.data());
            st.counters["build_ms"] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            pq.decode(codes.data(), D.n, y.data());
        } else {
            faiss::ProductQuantizer pq(D.d, m, nbits);
            pq.cp.niter = iters;
            pq.cp.min_points_per_centroid = 1;
            if (impl == 2) pq.cp.max_points_per_centroid = 1 << 30;
            pq.verbose = false;
            pq.train(D.n, D.x.data());
            std::vector<uint8_t> codes((size_t)D.n * pq.code_size);
            pq.compute_codes(D.x.data(), codes.data(), D.n);
            st.counters["build_ms"] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            pq.decode(codes.data(), y.data(), D.n);
        }
    }
    quality(st, D, y);
}

void Args(benchmark::internal::Benchmark* b) {
    for (auto [m, nb] : {std::pair{2, 6}, std::pair{4, 8}})
        for (int it : {10, 25}) b->Args({m, nb, it});
    b->ArgNames({"m", "nbits", "iters"})->Iterations(1)->Unit(benchmark::kMillisecond);
}

BENCHMARK_CAPTURE(BM_PQ, ours, 0)->Apply(Args);
BENCHMARK_CAPTURE(BM_PQ, faiss, 1)->Apply(Args);
BENCHMARK_CAPTURE(BM_PQ, faiss_all, 2)->Apply(Args);

}  // namespace

BENCHMARK_MAIN();
