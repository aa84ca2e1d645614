// Part of the CPU emulation of cuda_api.hpp (docs/cuda.md, "CPU emulation"): float32 like the kernels but
// written independently of them and of the lib/ references; "device" memory is host memory, launches queued
// on their streams (common/emulation_streams.hpp). Linked with the check bodies into retro_check_emulation
// (and with the run path into retro_backend_emulation), it tests the checks themselves (input layouts,
// references, tolerances, poisoning) on machines without a GPU. It says nothing about the CUDA kernels.
// This file: segmented k-means (kmeans_api.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cluster/kmeans.hpp"
#include "common/emulation_streams.hpp"
#include "common/emulation_trace.hpp"
#include "common/registry.hpp"
#include "core/threads.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {
void assign_rows(const float* x, int n, int d, const float* c, int k, const int32_t* rb, const int32_t* cb, int S,
                 int radius, int32_t* assign) {
    for (int r = 0; r < n; ++r) {
        int s = 0;
        while (s + 1 < S && rb[s + 1] <= r) ++s;
        int c0 = radius < 0 ? 0 : cb[std::max(0, s - radius)], c1 = radius < 0 ? k : cb[std::min(S, s + radius + 1)];
        float best = -INFINITY;
        int arg = c0;
        for (int j = c0; j < c1; ++j) {
            float acc = 0;
            for (int e = d - 1; e >= 0; --e) acc += x[(size_t)r * d + e] * c[(size_t)j * d + e];
            if (acc > best) best = acc, arg = j;
        }
        assign[r] = arg;
    }
}
}  // namespace

void kmeans_assign(const float* x, int n, int d, const float* c, int k, const int32_t* rb, const int32_t* cb, int S,
                   int radius, int32_t* assign, void* st) {
    emu::kernel("kmeans_assign", x, n, d, c, k, rb, cb, S, radius, assign);
    emu::enqueue(st, [=] { assign_rows(x, n, d, c, k, rb, cb, S, radius, assign); });
}
// The build's own launches, each followed by its synchronous copy back: on the host at once.
KMeansResult segmented_kmeans_gpu(const float* x, int n, int d, const KMeansParams& p) {
    KMeansResult res;
    res.plan = kmeans_plan(n, p);
    res.n = n, res.d = d, res.k = res.plan.k;
    const int K = res.k, S = res.plan.segments();
    std::vector<float> centered;
    const float* xc = kmeans_center(x, n, d, p.center, res.mean, centered);
    std::vector<float> cent((size_t)K * d);
    kmeans_initial_centroids(xc, d, res.plan, p, cent.data());
    res.assign.resize(n);
    for (int it = 0; it + 1 < p.iters; ++it) {
        assign_rows(xc, n, d, cent.data(), K, res.plan.row_begin.data(), res.plan.cluster_begin.data(), S, 0,
                    res.assign.data());
        std::vector<float> sum((size_t)K * d, 0);
        std::vector<int> cnt(K, 0);
        for (int r = n - 1; r >= 0; --r) {  // reverse order: a different float summation than the CPU's
            const int j = res.assign[r];
            cnt[j]++;
            for (int e = 0; e < d; ++e) sum[(size_t)j * d + e] += xc[(size_t)r * d + e];
        }
        for (int j = 0; j < K; ++j) {
            if (!cnt[j]) continue;
            float nn = 0;
            for (int e = 0; e < d; ++e) nn += sum[(size_t)j * d + e] * sum[(size_t)j * d + e];
            if (!(nn > 0)) continue;
            const float inv = 1 / std::sqrt(nn);
            for (int e = 0; e < d; ++e) cent[(size_t)j * d + e] = sum[(size_t)j * d + e] * inv;
        }
    }
    if (p.final_assign == FinalAssign::probe && S > 1) {
        // as kmeans/kmeans.cu: the probed final pass (an IVF over the centroids) runs on the host
        kmeans_probe_assign(xc, d, cent.data(), res.plan, p, compute_threads(), res.assign.data());
    } else {
        assign_rows(xc, n, d, cent.data(), K, res.plan.row_begin.data(), res.plan.cluster_begin.data(), S,
                    kmeans_final_radius(p, S), res.assign.data());
    }
    kmeans_finish(x, cent.data(), res);
    return res;
}

RETRO_KERNEL_EMULATION(kmeans);

}  // namespace retro::cuda
