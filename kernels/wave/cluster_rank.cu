// The wave step's cluster ranking and zone selection (wave_api.hpp: cluster_rank, cluster_select).
// Written for clarity first (docs/cuda.md): fp16 loads, float32 arithmetic.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <cooperative_groups.h>

#include <atomic>
#include <cmath>
#include <string>

#include "common/device.cuh"
#include "core/error.hpp"
#include "cuda_api.hpp"
#include "wave/cluster_dots.cuh"

namespace retro::cuda {

namespace {

namespace cg = cooperative_groups;

// ---------------------------------------------------------------------------------------------------
// Cluster ranking
// ---------------------------------------------------------------------------------------------------

// One warp per cluster: scores[bk, h, j] = scale * q_h . c_j (-inf when invalid).
// grid (ceil(M / 4), B*Hkv), block 128.
__global__ void cluster_scores_kernel(ClusterScoreShape s, float scale, const float* q, const uint16_t* cent,
                                      const uint8_t* valid, float* scores) {
    const int bk = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int j = blockIdx.x * 4 + warp;
    if (j >= s.clusters) return;
    const int M = s.clusters, d = s.d, g = s.group;
    const size_t cj = ((size_t)bk * M + j) * d;
    const bool ok = valid == nullptr || valid[(size_t)bk * M + j] != 0;
    const int b = bk / s.kv_heads, kvh = bk % s.kv_heads;
    for (int h = 0; h < g; ++h) {
        const float* qh = q + ((size_t)b * s.kv_heads * g + (size_t)kvh * g + h) * d;
        float acc = 0;
        for (int e = lane; e < d; e += 32) acc += qh[e] * h2f(cent[cj + e]);
        acc = warp_sum(acc);
        if (lane == 0) scores[((size_t)bk * g + h) * M + j] = ok ? scale * acc : -INFINITY;
    }
}

// The same scores, bandwidth-minded (d = 32 * PER, PER in {1, 2, 4, 8}; G >= group in {1, 2, 4, 8}): lane
// l holds dims [l*PER, l*PER + PER) of the g queries (registers) and of each centroid (one 2*PER-byte
// load), a warp scores kClustersPerWarp clusters with their loads issued before any math, and the dot
// products are reduced 32 at a time by transpose_sum (one sum per lane). The first version (above: 2-byte loads, one
// cluster per warp, the centroid re-read per head) took most of the ranking's 107-335 us on the H100.
// grid (ceil(M / (8 * kClustersPerWarp)), B*Hkv), block 256. With 4 clusters per warp (1 KB in flight,
// 16K short blocks that each reload the queries) it read 134 MB in 90 us on the H200 at 128K batch 8
// (1.5 TB/s, ncu); 16 per warp keep 4 KB in flight per warp and a quarter of the blocks, but reduced
// head by head with a 5-shuffle butterfly per sum it still took 78 us (1.7 TB/s).
constexpr int kClustersPerWarp = 16;

template <int PER, int G>
__global__ void cluster_scores_vec_kernel(ClusterScoreShape s, float scale, const float* q, const uint16_t* cent,
                                          const uint8_t* valid, float* scores) {
    const int bk = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int M = s.clusters, g = s.group, d = PER * 32;
    const int b = bk / s.kv_heads, kvh = bk % s.kv_heads;
    const float* qb = q + ((size_t)b * s.kv_heads * g + (size_t)kvh * g) * d + lane * PER;
    float qr[G][PER];
#pragma unroll
    for (int h = 0; h < G; ++h)
#pragma unroll
        for (int i = 0; i < PER; ++i) qr[h][i] = h < g ? qb[(size_t)h * d + i] : 0.0f;
    const int j0 = (blockIdx.x * 8 + warp) * kClustersPerWarp;
    float c[kClustersPerWarp][PER];
#pragma unroll
    for (int k = 0; k < kClustersPerWarp; ++k) {
        const int j = j0 + k;
        if (j < M) load_halves<PER>(cent + ((size_t)bk * M + j) * d + lane * PER, c[k]);
        else
#pragma unroll
            for (int i = 0; i < PER; ++i) c[k][i] = 0.0f;
    }
    // KC clusters' G dot products reduced together (N = KC * G sums, 32 where the warp's clusters allow:
    // one sum per lane) by transpose_sum: ~1 shuffle per sum instead of a butterfly's 5, which made this
    // kernel shuffle-bound (16 clusters x 4 heads x 5 = 320 shuffles per warp against 4 KB of loads)
    constexpr int KC = 32 / G < kClustersPerWarp ? 32 / G : kClustersPerWarp, SHIFT = transposed_shift(KC * G);
#pragma unroll
    for (int k0 = 0; k0 < kClustersPerWarp; k0 += KC) {
        if (j0 + k0 >= M) break;  // warp-uniform
        float v[KC * G];
        warp_cluster_dots<KC>(qr, c + k0, v, lane);
        const int idx = lane >> SHIFT, k = idx / G, h = idx % G, j = j0 + k0 + k;
        if ((lane & ((1 << SHIFT) - 1)) == 0 && h < g && j < M) {
            const bool ok = valid == nullptr || valid[(size_t)bk * M + j] != 0;
            scores[((size_t)bk * g + h) * M + j] = ok ? scale * v[0] : -INFINITY;
        }
    }
}

template <int PER>
void launch_scores_vec(const ClusterScoreShape& s, float scale, const float* q, const uint16_t* cent,
                       const uint8_t* valid, float* scores, cudaStream_t stream) {
    const dim3 grid((s.clusters + 8 * kClustersPerWarp - 1) / (8 * kClustersPerWarp), s.batch * s.kv_heads);
    if (s.group == 1) cluster_scores_vec_kernel<PER, 1><<<grid, 256, 0, stream>>>(s, scale, q, cent, valid, scores);
    else if (s.group == 2) cluster_scores_vec_kernel<PER, 2><<<grid, 256, 0, stream>>>(s, scale, q, cent, valid, scores);
    else if (s.group <= 4) cluster_scores_vec_kernel<PER, 4><<<grid, 256, 0, stream>>>(s, scale, q, cent, valid, scores);
    else cluster_scores_vec_kernel<PER, 8><<<grid, 256, 0, stream>>>(s, scale, q, cent, valid, scores);
}

// Block reduction helpers over 256 threads.
__device__ float block_max(float v, float* sh) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
    __syncthreads();
    float r = -INFINITY;
    for (int w = 0; w < (int)blockDim.x / 32; ++w) r = fmaxf(r, sh[w]);
    __syncthreads();
    return r;
}
__device__ float block_sum(float v, float* sh) {
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
    __syncthreads();
    float r = 0;
    for (int w = 0; w < (int)blockDim.x / 32; ++w) r += sh[w];
    __syncthreads();
    return r;
}

// agg[bk, j] = sum_h softmax_j(scores[bk, h, :]) over valid j; invalid -> -inf. Also writes the id
// sequence the sort permutes. grid B*Hkv, block 256.
__global__ void cluster_softmax_sum_kernel(ClusterScoreShape s, const float* scores, float* agg, int32_t* ids) {
    __shared__ float sh[32];
    const int bk = blockIdx.x, M = s.clusters, g = s.group;
    float* a = agg + (size_t)bk * M;
    for (int j = threadIdx.x; j < M; j += blockDim.x) {
        a[j] = 0.0f;
        ids[(size_t)bk * M + j] = j;
    }
    for (int h = 0; h < g; ++h) {
        const float* sc = scores + ((size_t)bk * g + h) * M;
        float mx = -INFINITY;
        for (int j = threadIdx.x; j < M; j += blockDim.x) mx = fmaxf(mx, sc[j]);
        mx = block_max(mx, sh);
        float sum = 0;
        if (mx != -INFINITY)
            for (int j = threadIdx.x; j < M; j += blockDim.x) sum += __expf(sc[j] - mx);
        sum = block_sum(sum, sh);
        const float inv = sum > 0 ? 1.0f / sum : 0.0f;
        // each thread owns the same j for every h, so the per-j sum runs h = 0..g-1 as the CPU's does
        for (int j = threadIdx.x; j < M; j += blockDim.x)
            if (sc[j] != -INFINITY) a[j] += __expf(sc[j] - mx) * inv;
    }
    for (int j = threadIdx.x; j < M; j += blockDim.x)
        if (scores[(size_t)bk * g * M + j] == -INFINITY) a[j] = -INFINITY;  // invalid (head 0 marks it)
}

// The ranking in one kernel when a (b, kv head)'s clusters fit one block (M <= 1024 * ITEMS): the
// softmax sum above (same per-head order of additions), then a stable descending block radix sort of
// (agg, id) in shared memory, the invalid clusters (-inf) last by ascending id, the padding past M after
// them. One block per (b, kv head), no trip through the global segmented sort (which, with one segment per
// block and eight 4-bit passes over global memory, was most of the ranking's 198 us at 128K).
// grid B*Hkv, block 1024, dynamic shared memory: the sort's TempStorage.
constexpr int kRankThreads = 1024;

// Thread t's ITEMS aggregates a[i] of clusters t*ITEMS + i (softmax over the valid clusters of each of
// the g heads, summed over the heads in head order: the CPU's order of additions; invalid and padding
// -inf), written to agg; shared by the sort and the select kernels so both rank bit-identical values.
template <int ITEMS>
__device__ void group_aggregates(const ClusterScoreShape& s, int bk, const float* scores, float* agg,
                                 float (&a)[ITEMS], float* sh) {
    const int M = s.clusters, g = s.group, t0 = threadIdx.x * ITEMS;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) a[i] = 0.0f;
    for (int h = 0; h < g; ++h) {
        const float* sc = scores + ((size_t)bk * g + h) * M;
        float x[ITEMS], mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) x[i] = t0 + i < M ? sc[t0 + i] : -INFINITY, mx = fmaxf(mx, x[i]);
        mx = block_max(mx, sh);
        float sum = 0;
        if (mx != -INFINITY)
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) sum += __expf(x[i] - mx);
        sum = block_sum(sum, sh);
        const float inv = sum > 0 ? 1.0f / sum : 0.0f;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (x[i] != -INFINITY) a[i] += __expf(x[i] - mx) * inv;
    }
    const float* sc0 = scores + (size_t)bk * g * M;  // head 0 marks the invalid clusters
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        if (t0 + i >= M || sc0[t0 + i] == -INFINITY) a[i] = -INFINITY;
        if (t0 + i < M) agg[(size_t)bk * M + t0 + i] = a[i];
    }
}

template <int ITEMS>
__global__ void __launch_bounds__(kRankThreads) cluster_sort_block_kernel(ClusterScoreShape s, const float* scores,
                                                                         float* agg, int32_t* ranked) {
    using Sort = cub::BlockRadixSort<float, kRankThreads, ITEMS, int32_t>;
    extern __shared__ __align__(16) unsigned char smem[];
    typename Sort::TempStorage& tmp = *reinterpret_cast<typename Sort::TempStorage*>(smem);
    __shared__ float sh[32];
    const int bk = blockIdx.x, M = s.clusters, t0 = threadIdx.x * ITEMS;
    float a[ITEMS];
    int32_t id[ITEMS];
    group_aggregates<ITEMS>(s, bk, scores, agg, a, sh);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) id[i] = t0 + i;
    Sort(tmp).SortDescending(a, id);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
        if (t0 + i < M) ranked[(size_t)bk * M + t0 + i] = id[i];
}

// ---- the zones without a full sort (cluster_select) ----

// An unsigned key in the order of the float (larger float, larger key); -inf -> 0x007fffff, padding 0.
__device__ __forceinline__ uint32_t order_key(float a) {
    const uint32_t f = __float_as_uint(a);
    return (f & 0x80000000u) ? ~f : (f | 0x80000000u);
}

using RankScan = cub::BlockScan<int, kRankThreads>;

// order_key(-inf): the key of an invalid cluster (padding past M is 0, every finite aggregate above it)
constexpr uint32_t kInvalidKey = 0x007fffffu;

// cluster_select's histogram variants (SelectHist), as bits of the kernels' MODE
constexpr int kHistCombine = 1;   // one histogram while the two prefixes agree, runs of equal digits added once
constexpr int kHistAdaptive = 2;  // the passes start at the valid keys' highest differing bit

// The valid keys' (key > kInvalidKey) minimum, maximum and count over the block, in every thread.
template <int ITEMS>
__device__ void valid_key_range(const uint32_t (&key)[ITEMS], uint32_t& lo, uint32_t& hi, int& v) {
    __shared__ uint32_t red[3][32];
    lo = 0xffffffffu, hi = 0u, v = 0;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
        if (key[i] > kInvalidKey) lo = min(lo, key[i]), hi = max(hi, key[i]), ++v;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    for (int round = 0; round < 2; ++round) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
            hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
            v += __shfl_xor_sync(0xffffffffu, v, o);
        }
        if (round == 1) break;
        if (lane == 0) red[0][warp] = lo, red[1][warp] = hi, red[2][warp] = (uint32_t)v;
        __syncthreads();  // every warp then reduces the warps' values itself: no second barrier
        lo = lane < nw ? red[0][lane] : 0xffffffffu;
        hi = lane < nw ? red[1][lane] : 0u;
        v = lane < nw ? (int)red[2][lane] : 0;
    }
}

// One warp finds the digit of a radix pass holding the kz-th largest key from the pass's histogram (bins
// [256], digit 255 the largest): out[0] = the digit, out[1] = how many of the keys with that digit are
// still to take. Lane l holds digits 255 - 8l ... 248 - 8l; a warp scan of their counts, the first lane
// reaching kz walks its eight.
__device__ void resolve_digit(const int* bins, int kz, int lane, int* out) {
    int c[8], sum = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) c[j] = bins[255 - (lane * 8 + j)], sum += c[j];
    int inc = sum;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += y;
    }
    const unsigned ball = __ballot_sync(0xffffffffu, inc >= kz);
    if (lane == __ffs(ball) - 1) {
        int cum = inc - sum;
        for (int j = 0; j < 8; ++j) {
            if (cum + c[j] >= kz) {
                out[0] = 255 - (lane * 8 + j), out[1] = kz - cum;
                break;
            }
            cum += c[j];
        }
    }
}

// Which of the block's items are among its K[0] largest and which among its K[1] largest, in the order
// (key descending, id ascending), as a bit mask per thread each (bit i = item t*ITEMS + i; K[z] = 0 gives
// an empty mask, else 1 <= K[z] <= items). MSB-first radix select over 8-bit digits finds the K-th largest
// key T and how many items equal to T belong (`take`); those are the lowest ids among the equal ones (a
// block scan over the per-thread counts in id order). Both selections run in the same four passes (two
// histograms, two warps resolving them): wave's two zone boundaries at the cost of one.
// MODE (SelectHist): kHistCombine shares the histogram; kHistAdaptive first reduces the valid keys' range
// and starts the passes at the highest bit in which they differ (the bits above are common to every valid
// key): the aggregates are softmax sums in [0, g], whose keys share their top bits, so the first pass of
// the plain variant puts all 8192 items in a handful of bins and its shared atomics serialize on them;
// from the range's top bit the first digit spreads over the exponents and mantissas actually present.
// A selection larger than the valid keys (K > valid) takes them all and its threshold is kInvalidKey.
template <int ITEMS, int MODE>
__device__ void top_k_masks(const uint32_t (&key)[ITEMS], const int (&K)[2], uint32_t (&in)[2], int (*hist)[256],
                            int* sh, typename RankScan::TempStorage& scan) {
    constexpr bool COMBINE = (MODE & kHistCombine) != 0;
    uint32_t prefix[2] = {0u, 0u}, mask = 0;
    int k[2] = {K[0], K[1]};
    bool active[2] = {K[0] > 0, K[1] > 0};  // block-uniform: the selection still has passes to resolve
    int top = 31;                           // the highest bit the passes resolve
    if constexpr ((MODE & kHistAdaptive) != 0) {
        uint32_t lo, hi;
        int v;
        valid_key_range<ITEMS>(key, lo, hi, v);
        top = lo < hi ? 31 - __clz(lo ^ hi) : -1;  // -1: one valid key value (or none): no pass
        mask = top >= 0 ? ~((2u << top) - 1u) : 0xffffffffu;  // top 31: 2u << 31 wraps to 0, the mask to 0
#pragma unroll
        for (int z = 0; z < 2; ++z) {
            if (K[z] > v) prefix[z] = kInvalidKey, k[z] = K[z] - v, active[z] = false;  // every valid key, then invalid ones
            else prefix[z] = lo & mask;
            if (K[z] <= v && top < 0) active[z] = false, prefix[z] = lo;  // T = the one valid value, take K
        }
    }
    for (int hi_bit = top; hi_bit >= 0; hi_bit -= 8) {
        const int shift = max(hi_bit - 7, 0);
        const uint32_t dmask = (2u << (hi_bit - shift)) - 1u;  // 255 but in a last, narrower pass
        for (int i = threadIdx.x; i < 2 * 256; i += blockDim.x) hist[i / 256][i % 256] = 0;
        __syncthreads();
        if constexpr (!COMBINE) {
            // plain shared atomics: warp-aggregating them with __match_any_sync (the first passes' digits
            // share a few exponents) made the select 11 us slower at 128K batch 1 on the H200 (57 -> 68 us)
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
#pragma unroll
                for (int z = 0; z < 2; ++z)
                    if (active[z] && (key[i] & mask) == prefix[z]) atomicAdd(&hist[z][(key[i] >> shift) & dmask], 1);
        } else {
            // the variant (RETRO_SELECT_HIST=combined): the two selections share one histogram while their
            // prefixes agree (always in the first pass, where every key is counted), and each thread adds a
            // run of equal digits among its items once: the first passes' digits fall in a few bins, so
            // the block's atomics serialize on them
            const bool same = active[0] && active[1] && prefix[0] == prefix[1];
#pragma unroll
            for (int z = 0; z < 2; ++z) {
                if (!active[z] || (z == 1 && same)) continue;  // block-uniform
                unsigned run_bin = 0;
                int run = 0;
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    if ((key[i] & mask) != prefix[z]) continue;
                    const unsigned bin = (key[i] >> shift) & dmask;
                    if (run > 0 && bin != run_bin) atomicAdd(&hist[z][run_bin], run), run = 0;
                    run_bin = bin, ++run;
                }
                if (run > 0) atomicAdd(&hist[z][run_bin], run);
            }
            if (same) {
                __syncthreads();
                for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[1][i] = hist[0][i];
            }
        }
        __syncthreads();
        const int z = threadIdx.x / 32;
        // selects, not k[z] / active[z]: a thread-dependent index puts the arrays in local memory
        const bool act = z == 0 ? active[0] : (z == 1 && active[1]);
        const int kz = z == 0 ? k[0] : k[1];
        if (act) resolve_digit(hist[z], kz, threadIdx.x % 32, sh + 2 * z);  // warp z resolves selection z
        __syncthreads();
#pragma unroll
        for (int y = 0; y < 2; ++y)
            if (active[y]) prefix[y] |= (uint32_t)sh[2 * y] << shift, k[y] = sh[2 * y + 1];
        mask |= dmask << shift;
        __syncthreads();
    }
    // the items equal to each threshold, counted in id order (packed: selection 0 low 16 bits, M <= 8192)
    int eq = 0;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) eq += (int)(key[i] == prefix[0]) + ((int)(key[i] == prefix[1]) << 16);
    int before = 0;
    RankScan(scan).ExclusiveSum(eq, before);
    __syncthreads();
    int seen[2] = {before & 0xffff, before >> 16};
    in[0] = in[1] = 0u;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
#pragma unroll
        for (int y = 0; y < 2; ++y) {
            if (K[y] == 0) continue;
            if (key[i] > prefix[y]) in[y] |= 1u << i;
            else if (key[i] == prefix[y]) {
                if (seen[y] < k[y]) in[y] |= 1u << i;
                ++seen[y];
            }
        }
}

// The retrieval members' order by counting when r is small: thread t < r places entry t (entered in id
// order) at the number of entries ahead of it (a larger key, or an equal key with a lower id): the
// stable descending order, r reads of shared memory per thread (broadcasts) where the block radix sort
// costs the same eight passes for any r.
constexpr int kCountingSortMax = 256;

// The retrieval members in rank order: a stable descending order of the r keys top_key[0, r) entered in
// id order (ids top_id), written to out[0, r). By counting when r <= kCountingSortMax, else a block
// radix sort of one key per thread (r <= 1024). Every thread of the 1024-thread block calls it.
template <typename Sort>
__device__ void order_retrieval(const uint32_t* top_key, const int32_t* top_id, int r, int32_t* out,
                                typename Sort::TempStorage& sort) {
    const int t = threadIdx.x;
    if (r <= kCountingSortMax) {
        if (t < r) {
            const uint32_t mine = top_key[t];
            int ahead = 0;
            for (int u = 0; u < r; ++u) ahead += top_key[u] > mine || (top_key[u] == mine && u < t);
            out[ahead] = top_id[t];
        }
        return;
    }
    uint32_t k1[1] = {t < r ? top_key[t] : 0u};
    int32_t v1[1] = {t < r ? top_id[t] : 0x7fffffff};
    Sort(sort).SortDescending(k1, v1);
    if (t < r) out[t] = v1[0];
}

// The zones of each (b, kv head) without sorting all M clusters (RetroInfer needs the top r in rank
// order, for the cache's admission order, and the next e as a set): the aggregates as the sort kernel
// computes them, the top-r and top-(r+e) members by radix select, the estimation members written in id
// order after r, the retrieval members sorted (r <= 1024: one key per thread) into ranked[0, r). The
// full block sort of 8192 clusters took 52 us per (b, kv head) block on the H200 (ncu, 128K batch 8);
// this kernel 46 us with its two selections in separate passes and every r through the radix sort.
// grid B*Hkv, block 1024; M <= 1024 * ITEMS (ITEMS <= 8), r + e <= M, r <= 1024.
template <int ITEMS, int MODE>
__global__ void __launch_bounds__(kRankThreads) cluster_select_block_kernel(ClusterScoreShape s, int r, int e,
                                                                           const float* scores, float* agg,
                                                                           int32_t* ranked) {
    using Sort = cub::BlockRadixSort<uint32_t, kRankThreads, 1, int32_t>;
    __shared__ union {
        typename RankScan::TempStorage scan;
        typename Sort::TempStorage sort;
    } tmp;
    __shared__ int hist[2][256], sh[4];
    __shared__ float shf[32];
    __shared__ uint32_t top_key[kRankThreads];
    __shared__ int32_t top_id[kRankThreads];
    const int bk = blockIdx.x, M = s.clusters, t0 = threadIdx.x * ITEMS;
    uint32_t key[ITEMS];
    {
        float a[ITEMS];
        group_aggregates<ITEMS>(s, bk, scores, agg, a, shf);
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) key[i] = t0 + i < M ? order_key(a[i]) : 0u;
    }
    const int K[2] = {r, r + e};
    uint32_t in[2];
    top_k_masks<ITEMS, MODE>(key, K, in, hist, sh, tmp.scan);
    const uint32_t in_r = in[0], in_e = in[1] & ~in[0];
    // positions: retrieval count in the low 16 bits, estimation count above (r <= 1024, e < 65536)
    int packed = __popc(in_r) | (__popc(in_e) << 16), off = 0;
    RankScan(tmp.scan).ExclusiveSum(packed, off);
    __syncthreads();
    int pr = off & 0xffff, pe = off >> 16;
    int32_t* out = ranked + (size_t)bk * M;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        if (in_r >> i & 1u) top_key[pr] = key[i], top_id[pr] = t0 + i, ++pr;
        if (in_e >> i & 1u) out[r + pe++] = t0 + i;
    }
    __syncthreads();
    order_retrieval<Sort>(top_key, top_id, r, out, tmp.sort);
}

// ---- cluster_select split over a thread-block cluster (select_split; wave_api.hpp) ----

// A cluster of kSelectSplitBlocks blocks per (b, kv head) holds one cluster (item) per thread: block q's
// thread t holds item j = q * 1024 + t. The aggregates equal cluster_select_block_kernel<ITEMS>'s bit for
// bit: that kernel's thread T holds items [T * ITEMS, T * ITEMS + ITEMS) and sums their exponentials in
// order from 0, its warps reduce those sums by warp_sum's butterfly and lane 0's total is kept, the block
// adds its 32 warps' totals in order from 0; here the ITEMS lanes of one T (neighbours in one warp) add
// in the same order by a shuffle chain, one warp per T-warp runs the same butterfly on the same lanes,
// and every block adds the 32 totals read from the blocks holding them. Maxima are exact in any order.
// The zones then follow from the same keys by the same radix select (plain histograms: the variants were
// within 1.5% of each other), its histograms summed over the blocks' shared memory each pass (double
// buffered by the pass's parity, so one cluster barrier a pass), the ties' id-order counts and the zones'
// places by a block scan plus the lower blocks' totals, the retrieval members gathered into block 0's
// shared memory and put in rank order there as the one-block kernel does. Nine cluster barriers.
// grid kSelectSplitBlocks * B*Hkv (cluster dims kSelectSplitBlocks), block 1024; M <= 1024 * ITEMS,
// r + e <= M, r <= 1024; sm_90 (the launch refuses older devices before this runs).
template <int ITEMS>
__global__ void __launch_bounds__(kRankThreads) cluster_select_split_kernel(ClusterScoreShape s, int r, int e,
                                                                           const float* scores, float* agg,
                                                                           int32_t* ranked) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int kBlocks = kSelectSplitBlocks;
    constexpr int kT = kRankThreads / ITEMS;  // the one-block kernel's threads whose items a block holds
    constexpr int kW = kT / 32;               // ... and their warps
    using Sort = cub::BlockRadixSort<uint32_t, kRankThreads, 1, int32_t>;
    // under the static 48 KB: the one-block sums share the scan's and sort's storage (used after them), the
    // histograms share the retrieval members' (written into block 0 only after every pass has been read)
    __shared__ union {
        typename RankScan::TempStorage scan;
        typename Sort::TempStorage sort;
        float tsum[kMaxGroup][kT];
    } tmp;
    __shared__ union {
        struct {
            int hist[2][2][256], comb[2][256];
        } pass;
        struct {
            uint32_t key[kRankThreads];
            int32_t id[kRankThreads];
        } top;
    } sel;
    __shared__ float wred[kMaxGroup][32], bmax[kMaxGroup], all[kMaxGroup][32], wpart[kMaxGroup][kW],
        head_mx[kMaxGroup], head_inv[kMaxGroup];
    __shared__ int res[4], btot[2], boff;
    auto& tsum = tmp.tsum;
    auto& hist = sel.pass.hist;
    auto& comb = sel.pass.comb;
    uint32_t* top_key = sel.top.key;
    int32_t* top_id = sel.top.id;
    cg::cluster_group cl = cg::this_cluster();
    const int q = (int)cl.block_rank(), bk = blockIdx.x / kBlocks, M = s.clusters, g = s.group;
    const int t = threadIdx.x, lane = t % 32, warp = t / 32, j = q * kRankThreads + t;
    const int i_item = lane % ITEMS;  // this item's place among its one-block thread's ITEMS
    float x[kMaxGroup];
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
        x[h] = h < g && j < M ? scores[((size_t)bk * g + h) * M + j] : -INFINITY;
        if (h >= g) continue;  // block-uniform
        float v = x[h];
        for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (lane == 0) wred[h][warp] = v;
    }
    __syncthreads();
    if (warp < g) {  // warp h: the block's maximum of head h
        float v = wred[warp][lane];
        for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (lane == 0) bmax[warp] = v;
    }
    cl.sync();  // 1: every block's maxima
    if (t < g * kBlocks) all[t / kBlocks][t % kBlocks] = *cl.map_shared_rank(&bmax[t / kBlocks], t % kBlocks);
    __syncthreads();
    if (t < g) {
        float m = -INFINITY;
        for (int b = 0; b < kBlocks; ++b) m = fmaxf(m, all[t][b]);
        head_mx[t] = m;
    }
    __syncthreads();
    // each one-block thread's sum of its ITEMS exponentials, in item order (sum = 0, then += each)
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
        if (h >= g) break;  // block-uniform
        const float mx = head_mx[h];
        const float ex = mx != -INFINITY ? __expf(x[h] - mx) : 0.0f;
        float acc = i_item == 0 ? ex : 0.0f;  // 0 + e0 == e0
#pragma unroll
        for (int k = 1; k < ITEMS; ++k) {
            const float prev = __shfl_up_sync(0xffffffffu, acc, 1);
            if (i_item == k) acc = prev + ex;
        }
        if (i_item == ITEMS - 1 && j < kRankThreads * ITEMS) tsum[h][t / ITEMS] = acc;
    }
    __syncthreads();
    if (warp < kW && q * kW + warp < 32)  // the one-block kernel's warp q * kW + warp: its butterfly, lane 0
        for (int h = 0; h < g; ++h) {
            const float v = warp_sum(tsum[h][warp * 32 + lane]);
            if (lane == 0) wpart[h][warp] = v;
        }
    cl.sync();  // 2: every block's warp totals
    if (t < g * 32) {
        const int h = t / 32, w = t % 32;  // the one-block kernel's warp w lives in block w / kW
        all[h][w] = *cl.map_shared_rank(&wpart[h][w % kW], w / kW);
    }
    __syncthreads();
    if (t < g) {
        float sum = 0;
        if (head_mx[t] != -INFINITY)
            for (int w = 0; w < 32; ++w) sum += all[t][w];
        head_inv[t] = sum > 0 ? 1.0f / sum : 0.0f;
    }
    __syncthreads();
    float a = 0.0f;
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
        if (h >= g) break;
        if (x[h] != -INFINITY) a += __expf(x[h] - head_mx[h]) * head_inv[h];
    }
    if (j >= M || x[0] == -INFINITY) a = -INFINITY;  // padding, or invalid (head 0 marks it)
    if (j < M) agg[(size_t)bk * M + j] = a;
    const uint32_t key = j < M ? order_key(a) : 0u;

    // the top r and top r + e keys: MSB-first radix select over 8-bit digits, histograms over the cluster
    const int K[2] = {r, r + e};
    uint32_t prefix[2] = {0u, 0u}, mask = 0;
    int k[2] = {K[0], K[1]};
    bool active[2] = {K[0] > 0, K[1] > 0};
    for (int pass = 0; pass < 4; ++pass) {
        const int shift = 24 - 8 * pass;
        int(*hp)[256] = hist[pass & 1];
        for (int i = t; i < 512; i += kRankThreads) hp[i / 256][i % 256] = 0;
        __syncthreads();
#pragma unroll
        for (int z = 0; z < 2; ++z)
            if (active[z] && (key & mask) == prefix[z]) atomicAdd(&hp[z][(key >> shift) & 255u], 1);
        cl.sync();  // 3-6: every block's histograms of this pass
        if (t < 512) {
            int sum = 0;
            for (int b = 0; b < kBlocks; ++b) sum += cl.map_shared_rank(&hist[pass & 1][0][0], b)[t];
            comb[t / 256][t % 256] = sum;
        }
        __syncthreads();
        const int z = warp;
        const bool act = z == 0 ? active[0] : (z == 1 && active[1]);
        const int kz = z == 0 ? k[0] : k[1];
        if (act) resolve_digit(comb[z], kz, lane, res + 2 * z);  // warp z resolves selection z
        __syncthreads();
#pragma unroll
        for (int y = 0; y < 2; ++y)
            if (active[y]) prefix[y] |= (uint32_t)res[2 * y] << shift, k[y] = res[2 * y + 1];
        mask |= 255u << shift;
    }
    // the keys equal to each threshold counted in id order over the cluster (selection 0 in the low 16 bits)
    const auto cluster_exclusive_sum = [&](int v, int buf) {
        int before = 0, total = 0;
        RankScan(tmp.scan).ExclusiveSum(v, before, total);
        if (t == 0) btot[buf] = total;
        cl.sync();  // 7, 8: every block's total
        if (t == 0) {
            int o = 0;
            for (int b = 0; b < q; ++b) o += *cl.map_shared_rank(&btot[buf], b);
            boff = o;
        }
        __syncthreads();
        return before + boff;
    };
    const int eq = (int)(key == prefix[0]) + ((int)(key == prefix[1]) << 16);
    const int seen = cluster_exclusive_sum(eq, 0);
    const int seen_y[2] = {seen & 0xffff, seen >> 16};
    bool in[2];
#pragma unroll
    for (int y = 0; y < 2; ++y)
        in[y] = K[y] > 0 && (key > prefix[y] || (key == prefix[y] && seen_y[y] < k[y]));
    const bool in_r = in[0], in_e = in[1] && !in[0];
    const int off = cluster_exclusive_sum((int)in_r | ((int)in_e << 16), 1);
    int32_t* out = ranked + (size_t)bk * M;
    if (in_e) out[r + (off >> 16)] = j;
    if (in_r) {  // into block 0's shared memory, in id order
        cl.map_shared_rank(top_key, 0)[off & 0xffff] = key;
        cl.map_shared_rank(top_id, 0)[off & 0xffff] = j;
    }
    cl.sync();  // 9: block 0 holds the retrieval members; no block reads another's memory after this
    if (q == 0) order_retrieval<Sort>(top_key, top_id, r, out, tmp.sort);  // the same r keys in the same order
#else
    __trap();  // launched on sm_90 and newer only (launch_select_split)
#endif
}

template <int ITEMS>
void launch_sort_block(const ClusterScoreShape& s, const float* scores, float* agg, int32_t* ranked,
                       cudaStream_t stream) {
    using Sort = cub::BlockRadixSort<float, kRankThreads, ITEMS, int32_t>;
    const size_t smem = sizeof(typename Sort::TempStorage);
    static bool raised = false;  // the dynamic shared-memory limit, once per process and ITEMS
    if (!raised) {
        const cudaError_t e = cudaFuncSetAttribute(cluster_sort_block_kernel<ITEMS>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) throw Error(std::string("cuda: cluster_sort_block smem: ") + cudaGetErrorString(e));
        raised = true;
    }
    cluster_sort_block_kernel<ITEMS><<<s.batch * s.kv_heads, kRankThreads, smem, stream>>>(s, scores, agg, ranked);
}

__global__ void segment_offsets_kernel(int n_seg, int M, int* offsets) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n_seg) offsets[i] = i * M;
}

struct RankWork {
    float* scores;     // [B*Hkv, g, M]
    int32_t* ids_in;   // [B*Hkv, M]
    float* keys_out;   // [B*Hkv, M]
    int* offsets;      // [B*Hkv + 1]
    void* sort_tmp;
    size_t sort_bytes;
};

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

size_t sort_temp_bytes(const ClusterScoreShape& s) {
    const int n_seg = s.batch * s.kv_heads;
    const int items = n_seg * s.clusters;
    size_t bytes = 0;
    cub::DeviceSegmentedRadixSort::SortPairsDescending(nullptr, bytes, (const float*)nullptr, (float*)nullptr,
                                                       (const int32_t*)nullptr, (int32_t*)nullptr, items,
                                                       n_seg, (const int*)nullptr, (const int*)nullptr);
    return bytes;
}

RankWork carve(const ClusterScoreShape& s, void* base, size_t* total) {
    const size_t n_seg = (size_t)s.batch * s.kv_heads, M = (size_t)s.clusters;
    char* p = static_cast<char*>(base);
    size_t off = 0;
    RankWork w{};
    auto take = [&](size_t bytes) {
        char* r = p ? p + off : nullptr;
        off += align256(bytes);
        return r;
    };
    w.scores = reinterpret_cast<float*>(take(n_seg * s.group * M * sizeof(float)));
    w.ids_in = reinterpret_cast<int32_t*>(take(n_seg * M * sizeof(int32_t)));
    w.keys_out = reinterpret_cast<float*>(take(n_seg * M * sizeof(float)));
    w.offsets = reinterpret_cast<int*>(take((n_seg + 1) * sizeof(int)));
    w.sort_bytes = sort_temp_bytes(s);
    w.sort_tmp = take(w.sort_bytes);
    *total = off;
    return w;
}

}  // namespace

size_t cluster_rank_workspace(const ClusterScoreShape& s) {
    check_cluster_shape(s);
    size_t total = 0;
    carve(s, nullptr, &total);
    return total;
}

namespace {
// The scores of every (b, kv head, head, cluster) into w.scores: [B*Hkv, g, M].
void launch_scores(const ClusterScoreShape& s, const float* q, const uint16_t* cent, const uint8_t* valid,
                   const RankWork& w, cudaStream_t stream) {
    const int n_seg = s.batch * s.kv_heads;
    const float scale = default_scale(s.scale, s.d);
    switch (s.d) {  // the vectorized scores where d = 32 * {1, 2, 4, 8}, else the first version
        case 32: launch_scores_vec<1>(s, scale, q, cent, valid, w.scores, stream); break;
        case 64: launch_scores_vec<2>(s, scale, q, cent, valid, w.scores, stream); break;
        case 128: launch_scores_vec<4>(s, scale, q, cent, valid, w.scores, stream); break;
        case 256: launch_scores_vec<8>(s, scale, q, cent, valid, w.scores, stream); break;
        default:
            cluster_scores_kernel<<<dim3((s.clusters + 3) / 4, n_seg), 128, 0, stream>>>(s, scale, q, cent, valid,
                                                                                       w.scores);
    }
    check_launch("cluster_scores");
}
}  // namespace

// cluster_select's histogram variants (top_k_masks' MODE): every build of the kernel in one binary, so a
// lease measures them side by side without a rebuild (select_histograms(), cuda_api.hpp).
namespace {
template <int ITEMS>
void launch_select_block(const ClusterScoreShape& s, int r, int e, const float* scores, float* agg, int32_t* ranked,
                         cudaStream_t stream) {
    auto* kernel = cluster_select_block_kernel<ITEMS, 0>;
    switch (select_histograms()) {
        case SelectHist::plain: break;
        case SelectHist::combined: kernel = cluster_select_block_kernel<ITEMS, kHistCombine>; break;
        case SelectHist::adaptive: kernel = cluster_select_block_kernel<ITEMS, kHistAdaptive>; break;
        case SelectHist::adaptive_combined:
            kernel = cluster_select_block_kernel<ITEMS, kHistAdaptive | kHistCombine>;
            break;
    }
    kernel<<<s.batch * s.kv_heads, kRankThreads, 0, stream>>>(s, r, e, scores, agg, ranked);
}

// The split select: kSelectSplitBlocks-block clusters set at launch (cudaLaunchKernelEx), so the kernel
// compiles for architectures without clusters too (its body traps there; select_split_for keeps them out).
// Its launch configuration for `pairs` (b, kv head)s; attr holds the cluster dimension cfg points to.
struct SplitLaunch {
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute attr[1];
    SplitLaunch(long long pairs, cudaStream_t stream) {
        cfg.gridDim = dim3((unsigned)(kSelectSplitBlocks * pairs));
        cfg.blockDim = dim3(kRankThreads);
        cfg.dynamicSmemBytes = 0;
        cfg.stream = stream;
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = kSelectSplitBlocks;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    SplitLaunch(const SplitLaunch&) = delete;  // cfg.attrs points into this object
    SplitLaunch& operator=(const SplitLaunch&) = delete;
};

template <int ITEMS>
void launch_select_split(const ClusterScoreShape& s, int r, int e, const float* scores, float* agg, int32_t* ranked,
                         cudaStream_t stream) {
    const SplitLaunch l((long long)s.batch * s.kv_heads, stream);
    check_cuda(cudaLaunchKernelEx(&l.cfg, cluster_select_split_kernel<ITEMS>, s, r, e, scores, agg, ranked),
               "cluster_select_split launch");
}

// How many of the split kernel's clusters the device runs at once (cudaOccupancyMaxActiveClusters with the
// launch's own shape: 1,024-thread blocks, its static shared memory, 8-block clusters): a cluster's blocks
// must share a GPC, so on an H100/H200 (132 SMs in GPCs of unequal size) it can be fewer than SMs / 8. Asked
// once per ITEMS; a failed query is not kept (the next call asks again) and counts as SMs / 8 meanwhile.
template <int ITEMS>
int split_active_clusters() {
    static std::atomic<int> kept{0};
    if (const int n = kept.load()) return n;
    const SplitLaunch l(1, nullptr);
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, cluster_select_split_kernel<ITEMS>, &l.cfg) != cudaSuccess || n <= 0) {
        cudaGetLastError();
        return device_sms() / kSelectSplitBlocks;
    }
    kept = n;
    return n;
}

}  // namespace

int select_split_active_clusters(int clusters) {
    if (device_cc() < 90) return 0;
    return clusters <= kRankThreads * 4 ? split_active_clusters<4>() : split_active_clusters<8>();
}

void cluster_select(const ClusterScoreShape& s, int r, int e, const float* q, const uint16_t* cent,
                    const uint8_t* valid, float* agg, int32_t* ranked, void* work, size_t work_bytes, void* stream) {
    check_cluster_shape(s);
    if (r < 0 || e < 0 || r + e > s.clusters)
        throw ParamError("cuda cluster_select: zones r=" + std::to_string(r) + " e=" + std::to_string(e) +
                         " for " + std::to_string(s.clusters) + " clusters");
    if (s.clusters == 0) return;
    if (r > kRankThreads || s.clusters > kRankThreads * 8)  // past one block's select: the full ranking
        return cluster_rank(s, q, cent, valid, agg, ranked, work, work_bytes, stream);
    size_t total = 0;
    RankWork w = carve(s, work, &total);
    if (work_bytes < total) throw ParamError("cuda cluster_select: workspace too small");
    launch_scores(s, q, cent, valid, w, st(stream));
    const SelectSplit split = select_split();
    const bool four = s.clusters <= kRankThreads * 4;  // ITEMS 4, else 8
    const int cc = device_cc();
    const int active = split == SelectSplit::automatic ? select_split_active_clusters(s.clusters) : 0;
    if (select_split_for(split, (long long)s.batch * s.kv_heads, cc, active)) {
        if (four) launch_select_split<4>(s, r, e, w.scores, agg, ranked, st(stream));
        else launch_select_split<8>(s, r, e, w.scores, agg, ranked, st(stream));
        check_launch("cluster_select_split");
        return;
    }
    if (four)
        launch_select_block<4>(s, r, e, w.scores, agg, ranked, st(stream));
    else
        launch_select_block<8>(s, r, e, w.scores, agg, ranked, st(stream));
    check_launch("cluster_select_block");
}

void cluster_rank(const ClusterScoreShape& s, const float* q, const uint16_t* cent, const uint8_t* valid,
                  float* agg, int32_t* ranked, void* work, size_t work_bytes, void* stream) {
    check_cluster_shape(s);
    if (s.clusters == 0) return;
    size_t total = 0;
    RankWork w = carve(s, work, &total);
    if (work_bytes < total) throw ParamError("cuda cluster_rank: workspace too small");
    const int n_seg = s.batch * s.kv_heads;
    launch_scores(s, q, cent, valid, w, st(stream));
    if (s.clusters <= kRankThreads * 16) {  // one block per (b, kv head): softmax sum and sort fused
        if (s.clusters <= kRankThreads * 4) launch_sort_block<4>(s, w.scores, agg, ranked, st(stream));
        else if (s.clusters <= kRankThreads * 8) launch_sort_block<8>(s, w.scores, agg, ranked, st(stream));
        else launch_sort_block<16>(s, w.scores, agg, ranked, st(stream));
        check_launch("cluster_sort_block");
        return;
    }
    cluster_softmax_sum_kernel<<<n_seg, 256, 0, st(stream)>>>(s, w.scores, agg, w.ids_in);
    check_launch("cluster_softmax_sum");
    segment_offsets_kernel<<<(n_seg + 256) / 256, 256, 0, st(stream)>>>(n_seg, s.clusters, w.offsets);
    check_launch("segment_offsets");
    // Stable radix sort, descending: equal aggregates keep ascending ids (the CPU's tie rule).
    size_t sb = w.sort_bytes;
    const cudaError_t e = cub::DeviceSegmentedRadixSort::SortPairsDescending(
        w.sort_tmp, sb, agg, w.keys_out, w.ids_in, ranked, n_seg * s.clusters, n_seg, w.offsets, w.offsets + 1, 0,
        (int)sizeof(float) * 8, st(stream));
    if (e != cudaSuccess) throw Error(std::string("cuda: segmented sort: ") + cudaGetErrorString(e));
}

}  // namespace retro::cuda
