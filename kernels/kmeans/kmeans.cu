// Segmented spherical k-means on the GPU (cuda_api.hpp): assignment and spherical update kernels; the
// plan, centering, initial centroids and the final means are lib/cluster/kmeans's own functions, so the
// GPU and CPU versions differ only in the order of float sums.
#include <cuda_runtime.h>

#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "cluster/kmeans.hpp"
#include "core/error.hpp"
#include "core/threads.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

void check_launch(const char* what) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) throw Error(std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}
cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }

__device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One warp per row (8 rows per block of 256): the lane holds dims lane + 32 i of the row and walks the
// row's centroid range; strict '>' keeps the lowest j on ties. d <= 256.
__global__ void assign_kernel(const float* x, int n, int d, const float* c, int k, const int32_t* row_begin,
                              const int32_t* cluster_begin, int S, int radius, int32_t* assign) {
    const int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= n) return;
    int c0 = 0, c1 = k;
    if (radius >= 0) {
        int lo = 0, hi = S - 1;  // segment of row: last s with row_begin[s] <= row
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (row_begin[mid] <= row) lo = mid;
            else hi = mid - 1;
        }
        c0 = cluster_begin[max(0, lo - radius)], c1 = cluster_begin[min(S, lo + radius + 1)];
    }
    float xr[8];
    const int per = d / 32;
    for (int i = 0; i < 8; ++i) xr[i] = i < per ? x[(size_t)row * d + lane + 32 * i] : 0.0f;
    float best = -INFINITY;
    int arg = c0;
    for (int j = c0; j < c1; ++j) {
        float acc = 0;
        for (int i = 0; i < per; ++i) acc += xr[i] * c[(size_t)j * d + lane + 32 * i];
        acc = warp_sum(acc);
        if (acc > best) best = acc, arg = j;
    }
    if (lane == 0) assign[row] = arg;
}

// sums[j] += x_r, cnt[j] += 1 for every row r (j = assign[r]). One warp per row.
__global__ void accumulate_kernel(const float* x, int n, int d, const int32_t* assign, float* sums, int* cnt) {
    const int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= n) return;
    const int j = assign[row];
    for (int e = lane; e < d; e += 32) atomicAdd(&sums[(size_t)j * d + e], x[(size_t)row * d + e]);
    if (lane == 0) atomicAdd(&cnt[j], 1);
}

// c_j = sums_j / ||sums_j|| where cnt_j > 0 and the norm is positive; else c_j is kept. One warp per j.
__global__ void normalize_kernel(int k, int d, const float* sums, const int* cnt, float* c) {
    const int j = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (j >= k || cnt[j] == 0) return;
    float nn = 0;
    for (int e = lane; e < d; e += 32) nn += sums[(size_t)j * d + e] * sums[(size_t)j * d + e];
    nn = warp_sum(nn);
    if (!(nn > 0)) return;
    const float inv = rsqrtf(nn);
    for (int e = lane; e < d; e += 32) c[(size_t)j * d + e] = sums[(size_t)j * d + e] * inv;
}

}  // namespace

void kmeans_assign(const float* x, int n, int d, const float* c, int k, const int32_t* row_begin,
                   const int32_t* cluster_begin, int S, int radius, int32_t* assign, void* stream) {
    if (d < 32 || d > 256 || d % 32 != 0) throw ParamError("cuda kmeans_assign: d must be 32..256, a multiple of 32");
    if (n <= 0) return;
    assign_kernel<<<(n + 7) / 8, 256, 0, st(stream)>>>(x, n, d, c, k, row_begin, cluster_begin, S, radius,
                                                       assign);
    check_launch("kmeans_assign");
}

KMeansResult segmented_kmeans_gpu(const float* x, int n, int d, const KMeansParams& p) {
    if (d <= 0) throw ParamError("k-means (gpu): dimension d = " + std::to_string(d) + ": expected >= 1");
    if (p.seed != 0) throw ParamError("k-means (gpu): only seed 0 (stride midpoints) is implemented");
    KMeansResult res;
    res.plan = kmeans_plan(n, p);
    const KMeansPlan& plan = res.plan;
    res.n = n, res.d = d, res.k = plan.k;
    const int K = plan.k, S = plan.segments();
    std::vector<float> centered;
    const float* xc = kmeans_center(x, n, d, p.center, res.mean, centered);
    std::vector<float> cent((size_t)K * d);
    kmeans_initial_centroids(xc, d, plan, p, cent.data());

    // One build's device part at a time (the backend builds its (sequence, KV head) indexes on several host
    // threads: their device buffers one after another, the host's final pass below side by side)
    static std::mutex device_part;
    std::unique_lock<std::mutex> one_at_a_time(device_part);
    DeviceBuffer<float> dx((size_t)n * d), dc((size_t)K * d), dsum((size_t)K * d);
    DeviceBuffer<int32_t> drb((size_t)S + 1), dcb((size_t)S + 1), das((size_t)n);
    DeviceBuffer<int> dcnt((size_t)K);
    copy_h2d(dx.get(), xc, dx.bytes());
    copy_h2d(dc.get(), cent.data(), dc.bytes());
    copy_h2d(drb.get(), plan.row_begin.data(), drb.bytes());
    copy_h2d(dcb.get(), plan.cluster_begin.data(), dcb.bytes());
    // Segments never share clusters, so one accumulate/normalize over all of them is the per-segment update.
    for (int it = 0; it + 1 < p.iters; ++it) {
        kmeans_assign(dx.get(), n, d, dc.get(), K, drb.get(), dcb.get(), S, 0, das.get());
        dev_memset(dsum.get(), 0, dsum.bytes());
        dev_memset(dcnt.get(), 0, dcnt.bytes());
        accumulate_kernel<<<(n + 7) / 8, 256>>>(dx.get(), n, d, das.get(), dsum.get(), dcnt.get());
        check_launch("kmeans accumulate");
        normalize_kernel<<<(K + 7) / 8, 256>>>(K, d, dsum.get(), dcnt.get(), dc.get());
        check_launch("kmeans normalize");
    }
    res.assign.resize((size_t)n);
    copy_d2h(cent.data(), dc.get(), dc.bytes());
    if (p.final_assign == FinalAssign::probe && S > 1) {
        // The probed pass (an IVF over the centroids) runs on the host: the same code as the CPU build.
        one_at_a_time.unlock();
        kmeans_probe_assign(xc, d, cent.data(), plan, p, compute_threads(), res.assign.data());
    } else {
        kmeans_assign(dx.get(), n, d, dc.get(), K, drb.get(), dcb.get(), S, kmeans_final_radius(p, S),
                      das.get());
        copy_d2h(res.assign.data(), das.get(), das.bytes());
    }
    kmeans_finish(x, cent.data(), res);
    return res;
}

}  // namespace retro::cuda
