// Attention-side kernels of cuda_api.hpp: cluster ranking, estimation zone, segment copies, flash-decoding
// over KV in GPU memory and the split/LSE merge. Written for clarity first (docs/cuda.md): fp16 loads,
// float32 arithmetic, one online-softmax state per (query head, lane group).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>

#include "convert.hpp"
#include "core/error.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

constexpr int kMaxGroup = 8;

void check_launch(const char* what) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) throw Error(std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}
cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }
float default_scale(float scale, int d) { return scale != 0.0f ? scale : 1.0f / std::sqrt((float)d); }

__device__ inline float h2f(uint16_t b) { return __half2float(__ushort_as_half(b)); }

// The LSE merge of partial states (flash-decoding section); the estimation merges its chunks with it too.
__global__ void decode_combine_kernel(DecodeShape s, const float* work, const float* extra_out,
                                      const float* extra_lse, float* out, float* lse);

// Sum over the whole warp.
__device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

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

template <int PER>
__device__ inline void load_halves(const uint16_t* p, float* out) {
    if constexpr (PER == 8) {
        const uint4 v = *reinterpret_cast<const uint4*>(p);
        const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 f = __half22float2(h[i]);
            out[2 * i] = f.x, out[2 * i + 1] = f.y;
        }
    } else if constexpr (PER == 4) {
        const uint2 v = *reinterpret_cast<const uint2*>(p);
        const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const float2 f = __half22float2(h[i]);
            out[2 * i] = f.x, out[2 * i + 1] = f.y;
        }
    } else if constexpr (PER == 2) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(p));
        out[0] = f.x, out[1] = f.y;
    } else {
        out[0] = h2f(p[0]);
    }
}

// Sums each of a lane's values over the warp's 32 lanes with about one shuffle per sum where a
// butterfly per sum takes five: at each level a lane keeps one half of its LIVE values, sends the
// other half to its partner (lane ^ O) and adds the partner's copy of the half it kept. After the five
// levels, with N values per lane: N >= 32, v[j] (j < N/32) holds the sum of value lane * (N/32) + j; N < 32,
// v[0] holds the sum of value lane >> (5 - log2 N) (lanes differing in the low bits hold the same sum).
// Each sum adds the same partial sums in the same pairs as the butterfly: bit-identical results.
template <int N, int LIVE = N, int O = 16>
__device__ inline void transpose_sum(float (&v)[N], int lane) {
    if constexpr (O > 0) {
        if constexpr (LIVE > 1) {
            constexpr int H = LIVE / 2;
            const bool upper = (lane & O) != 0;
#pragma unroll
            for (int i = 0; i < H; ++i) {
                const float send = upper ? v[i] : v[i + H];
                const float keep = upper ? v[i + H] : v[i];
                v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
            }
            transpose_sum<N, H, O / 2>(v, lane);
        } else {
            v[0] += __shfl_xor_sync(0xffffffffu, v[0], O);
            transpose_sum<N, 1, O / 2>(v, lane);
        }
    }
}

__host__ __device__ constexpr int log2_of(int n) { return n <= 1 ? 0 : 1 + log2_of(n / 2); }

/// After transpose_sum of N <= 32 values per lane, lane l holds sum number l >> transposed_shift(N).
__host__ __device__ constexpr int transposed_shift(int n) { return n >= 32 ? 0 : 5 - log2_of(n); }

// The G dot products of K clusters with the G queries, summed over the warp: lane l holds dims
// [l*PER, l*PER + PER) of each query (qr) and of each cluster row (c[0..K)); afterwards v[0] of lane l is
// the dot product number idx = l >> transposed_shift(K*G), cluster idx / G, query head idx % G. Shared by
// the scores and the estimation kernels.
template <int K, int G, int PER>
__device__ __forceinline__ void warp_cluster_dots(const float (&qr)[G][PER], const float (*c)[PER], float (&v)[K * G],
                                                  int lane) {
    static_assert(K * G <= 32 && ((K * G) & (K * G - 1)) == 0, "one sum per lane or fewer");
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
        for (int h = 0; h < G; ++h) {
            float a = 0;
#pragma unroll
            for (int i = 0; i < PER; ++i) a += qr[h][i] * c[k][i];
            v[k * G + h] = a;
        }
    transpose_sum(v, lane);
}

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
        if (act) {  // warp z resolves selection z; digits from 255 down: lane l holds 255 - 8l ... 248 - 8l
            const int lane = threadIdx.x % 32;
            int c[8], sum = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) c[j] = hist[z][255 - (lane * 8 + j)], sum += c[j];
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
                        sh[2 * z] = 255 - (lane * 8 + j), sh[2 * z + 1] = kz - cum;
                        break;
                    }
                    cum += c[j];
                }
            }
        }
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
    // the retrieval members in rank order: a stable descending order of r keys entered in id order
    if (r <= kCountingSortMax) {
        const int t = threadIdx.x;
        if (t < r) {
            const uint32_t mine = top_key[t];
            int ahead = 0;
            for (int u = 0; u < r; ++u) ahead += top_key[u] > mine || (top_key[u] == mine && u < t);
            out[ahead] = top_id[t];
        }
        return;
    }
    uint32_t k1[1] = {threadIdx.x < r ? top_key[threadIdx.x] : 0u};
    int32_t v1[1] = {threadIdx.x < r ? top_id[threadIdx.x] : 0x7fffffff};
    Sort(tmp.sort).SortDescending(k1, v1);
    if (threadIdx.x < r) out[threadIdx.x] = v1[0];
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

void check_cluster_shape(const ClusterScoreShape& s) {
    if (s.batch < 1 || s.kv_heads < 1 || s.group < 1 || s.group > kMaxGroup || s.clusters < 0 || s.d < 32 ||
        s.d > 256 || s.d % 32 != 0)
        throw ParamError("cuda cluster kernels: bad shape (group 1-8, d a multiple of 32 up to 256)");
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
}  // namespace

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
    if (s.clusters <= kRankThreads * 4)
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

// ---------------------------------------------------------------------------------------------------
// Estimation zone
// ---------------------------------------------------------------------------------------------------

namespace {

constexpr int kEstChunk = 64;  // estimation clusters per block (16 per warp)
constexpr int kEstWarps = 4;

// After each of the block's W warps wrote its online-softmax state (per query head h < g: m, l and acc
// over the d dims) to shared memory (sh_m, sh_l: [W][G]; sh_acc: [W][G][D], G >= g, D >= d): the states
// merged by LSE and written as chunk `chunk`'s partial state, work[qh, chunk] = (m, l, acc[d])
// (decode_combine_kernel's format).
template <int W, int G, int D>
__device__ void write_chunk_state(const ClusterScoreShape& s, int bk, int chunk, int chunks, const float (*sh_m)[G],
                                  const float (*sh_l)[G], const float (*sh_acc)[G][D], float* work) {
    const int b = bk / s.kv_heads, kvh = bk % s.kv_heads, g = s.group, d = s.d;
    for (int idx = threadIdx.x; idx < g * d; idx += blockDim.x) {
        const int h = idx / d, e = idx % d;
        float M_ = -INFINITY;
        for (int w = 0; w < W; ++w)
            if (sh_l[w][h] > 0) M_ = fmaxf(M_, sh_m[w][h]);
        float L = 0, A = 0;
        if (M_ != -INFINITY)
            for (int w = 0; w < W; ++w)
                if (sh_l[w][h] > 0) {
                    const float f = __expf(sh_m[w][h] - M_);
                    L += sh_l[w][h] * f;
                    A += sh_acc[w][h][e] * f;
                }
        const size_t qh = (size_t)b * s.kv_heads * g + (size_t)kvh * g + h;
        float* wp = work + (qh * chunks + chunk) * (size_t)(d + 2);
        if (e == 0) wp[0] = M_, wp[1] = L;
        wp[2 + e] = A;
    }
}

// grid (chunks, B*Hkv), block 128 (4 warps): block (c, bk) takes the ids [c*64, c*64 + 64) of its
// (b, kv head) and writes one partial state per query head, in decode_combine_kernel's format:
// work[qh, c] = (m, l, acc[d]) with l = sum size_j p_j and acc = sum p_j vsum_j / size_j * size_j. Warp w
// takes clusters w, w+4, ...; lane holds dims lane + 32 i. Parallel over clusters and heads: the old
// one-block-per-(b, kv head) kernel ran 8 blocks on a 132-SM GPU at batch 1.
__global__ void estimate_partial_kernel(ClusterScoreShape s, float scale, int E, int chunks, const int32_t* ids,
                                        const float* q, const uint16_t* cent, const uint16_t* vsum,
                                        const int32_t* sizes, float* work) {
    constexpr int W = kEstWarps, PER = 8;  // d <= 256 = 32 * 8
    __shared__ float sh_m[W][kMaxGroup], sh_l[W][kMaxGroup];
    __shared__ float sh_acc[W][kMaxGroup][256];
    const int chunk = blockIdx.x, bk = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int b = bk / s.kv_heads, kvh = bk % s.kv_heads, g = s.group, d = s.d, M = s.clusters;
    const int per = d / 32;
    const int t_end = min(E, (chunk + 1) * kEstChunk);
    float qr[kMaxGroup][PER], acc[kMaxGroup][PER], m[kMaxGroup], l[kMaxGroup];
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
        m[h] = -INFINITY, l[h] = 0;
        for (int i = 0; i < PER; ++i) {
            acc[h][i] = 0;
            qr[h][i] = (h < g && i < per) ? q[((size_t)b * s.kv_heads * g + (size_t)kvh * g + h) * d + lane + 32 * i]
                                          : 0.0f;
        }
    }
    for (int t = chunk * kEstChunk + warp; t < t_end; t += W) {
        const int c = ids[(size_t)bk * E + t];
        const size_t base = ((size_t)bk * M + c) * d;
        const float n = (float)sizes[(size_t)bk * M + c];
        float cv[PER], vv[PER];
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            cv[i] = i < per ? h2f(cent[base + lane + 32 * i]) : 0.0f;
            vv[i] = i < per ? h2f(vsum[base + lane + 32 * i]) : 0.0f;
        }
        if (n <= 0) continue;  // warp-uniform: an empty cluster contributes nothing
        float dots[kMaxGroup];
#pragma unroll
        for (int h = 0; h < kMaxGroup; ++h) {
            float dot = 0;
#pragma unroll
            for (int i = 0; i < PER; ++i) dot += qr[h][i] * cv[i];
            dots[h] = dot;
        }
        // the g reductions interleaved: independent shuffles in flight instead of g dependent chains
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int h = 0; h < kMaxGroup; ++h)
                if (h < g) dots[h] += __shfl_xor_sync(0xffffffffu, dots[h], o);
#pragma unroll
        for (int h = 0; h < kMaxGroup; ++h) {
            if (h >= g) break;
            const float sc = scale * dots[h];
            const float mn = fmaxf(m[h], sc);
            const float corr = __expf(m[h] - mn), p = __expf(sc - mn);
            l[h] = l[h] * corr + n * p;
#pragma unroll
            for (int i = 0; i < PER; ++i) acc[h][i] = acc[h][i] * corr + p * vv[i];
            m[h] = mn;
        }
    }
    // constant trip counts (guarded) keep m/l/acc in registers: a runtime bound would index them
    // dynamically and push the arrays to local memory
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
        if (h >= g) break;
        if (lane == 0) sh_m[warp][h] = m[h], sh_l[warp][h] = l[h];
#pragma unroll
        for (int i = 0; i < PER; ++i)
            if (i < per) sh_acc[warp][h][lane + 32 * i] = acc[h][i];
    }
    __syncthreads();
    write_chunk_state<W, kMaxGroup, 256>(s, bk, chunk, chunks, sh_m, sh_l, sh_acc, work);
}

// The estimation with 8/16-byte loads (d = 32 * PER, PER in {2, 4, 8}; G >= group in {1, 2, 4, 8}):
// lane l holds dims [l*PER, l*PER + PER) of the queries, each centroid and value sum, a warp loads four
// clusters before computing any (their ids and sizes read once per warp up front), and the state is
// sized for the group (the first version above keeps 8 heads x 256 dims: 191 registers, 2 blocks per
// SM). Same grid and output. With two loads in flight and the id read before each it took 57 us at
// 128K batch 8 on the H200 (62 MB: 1.1 TB/s; ncu); with four in flight and the ids up front, 59 us: its
// issue slots, not its loads, bound it (80 shuffles per four clusters, then the softmax), so the dot
// products are now reduced together (transpose_sum) and fetched per lane.
//
// W warps per block (kEstWarps = 4, or the wide variant's 8-16: estimate_warps_wide): a warp's clusters
// are a serial chain of online-softmax updates (the running max, its correction, the accumulators), and at
// batch 1 the grid's 240 blocks (128K: 30 chunks x 8 kv heads) leave each SM 2 warps per scheduler to
// hide that chain (ncu: 19 us for 7.8 MB at 128K batch 1). W = 16 gives each warp 4 clusters (one round
// of loads) and the SM 4x the warps, with the same chunks, so the combine's work does not grow.
template <int PER, int G, int W>
__global__ void __launch_bounds__(W * 32) estimate_partial_vec_kernel(ClusterScoreShape s, float scale, int E,
                                                                      int chunks, const int32_t* ids, const float* q,
                                                                      const uint16_t* cent, const uint16_t* vsum,
                                                                      const int32_t* sizes, float* work) {
    constexpr int PER_WARP = kEstChunk / W, U = PER_WARP < 4 ? PER_WARP : 4;  // U loads in flight
    static_assert(PER_WARP <= 32 && PER_WARP % U == 0, "one id per lane");
    __shared__ float sh_m[W][G], sh_l[W][G];
    __shared__ float sh_acc[W][G][PER * 32];
    const int chunk = blockIdx.x, bk = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int b = bk / s.kv_heads, kvh = bk % s.kv_heads, g = s.group, d = PER * 32, M = s.clusters;
    const float* qb = q + ((size_t)b * s.kv_heads * g + (size_t)kvh * g) * d + lane * PER;
    float qr[G][PER], acc[G][PER], m[G], l[G];
#pragma unroll
    for (int h = 0; h < G; ++h) {
        m[h] = -INFINITY, l[h] = 0;
#pragma unroll
        for (int i = 0; i < PER; ++i) acc[h][i] = 0, qr[h][i] = h < g ? qb[(size_t)h * d + i] : 0.0f;
    }
    // warp w takes the chunk's clusters [w*16, w*16 + 16): lane j < 16 reads cluster j's id and size once
    // (the id -> data chain no longer sits in front of every load), then shuffles them out
    const int t_first = chunk * kEstChunk + warp * PER_WARP;
    int my_c = 0, my_n = 0;
    if (lane < PER_WARP && t_first + lane < E) {
        my_c = ids[(size_t)bk * E + t_first + lane];
        my_n = sizes[(size_t)bk * M + my_c];
    }
#pragma unroll
    for (int t0 = 0; t0 < PER_WARP; t0 += U) {
        float cv[U][PER], vv[U][PER], n[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {  // every cluster's loads in flight before the math
            const int c = __shfl_sync(0xffffffffu, my_c, t0 + u);
            n[u] = (float)__shfl_sync(0xffffffffu, my_n, t0 + u);
            if (n[u] > 0) {
                const size_t base = ((size_t)bk * M + c) * d + lane * PER;
                load_halves<PER>(cent + base, cv[u]);
                load_halves<PER>(vsum + base, vv[u]);
            } else {
#pragma unroll
                for (int i = 0; i < PER; ++i) cv[u][i] = 0.0f;
            }
        }
        // the U clusters' G dot products reduced together (transpose_sum: N - 1 shuffles for N = U*G sums
        // where a butterfly per sum takes 5), then each lane fetches the sum it needs from the lane
        // holding it: 32 shuffles for 4 clusters x 4 heads instead of 80
        constexpr int SHIFT = transposed_shift(U * G);
        float sums[U * G];
        warp_cluster_dots<U>(qr, cv, sums, lane);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (!(n[u] > 0)) continue;  // warp-uniform: past the chunk, or an empty cluster
#pragma unroll
            for (int h = 0; h < G; ++h) {
                if (h >= g) break;
                const float dot = __shfl_sync(0xffffffffu, sums[0], (u * G + h) << SHIFT);
                const float sc = scale * dot;
                const float mn = fmaxf(m[h], sc);
                const float corr = __expf(m[h] - mn), p = __expf(sc - mn);
                l[h] = l[h] * corr + n[u] * p;
#pragma unroll
                for (int i = 0; i < PER; ++i) acc[h][i] = acc[h][i] * corr + p * vv[u][i];
                m[h] = mn;
            }
        }
    }
#pragma unroll
    for (int h = 0; h < G; ++h) {
        if (h >= g) break;
        if (lane == 0) sh_m[warp][h] = m[h], sh_l[warp][h] = l[h];
#pragma unroll
        for (int i = 0; i < PER; ++i) sh_acc[warp][h][lane * PER + i] = acc[h][i];
    }
    __syncthreads();
    write_chunk_state<W, G, PER * 32>(s, bk, chunk, chunks, sh_m, sh_l, sh_acc, work);
}

// The wide variant's warps per block: 16, fewer where their states would pass 32 KB of shared memory
// (W x G x d floats: 16 at g <= 4 and d = 128; 8 at g = 8 and d = 128; 4 at g = 8 and d = 256).
constexpr int estimate_warps_wide(int PER, int G) {
    return G * PER * 32 * 16 <= 8192 ? 16 : G * PER * 32 * 8 <= 8192 ? 8 : 4;
}

template <int PER, int G>
void launch_estimate_vec_group(const ClusterScoreShape& s, float scale, int E, int chunks, const int32_t* ids,
                               const float* q, const uint16_t* cent, const uint16_t* vsum, const int32_t* sizes,
                               float* work, cudaStream_t stream) {
    const dim3 grid(chunks, s.batch * s.kv_heads);
    constexpr int WW = estimate_warps_wide(PER, G);
    if (estimate_wide_for(estimate_width(), (long long)grid.x * grid.y, device_sms()))
        estimate_partial_vec_kernel<PER, G, WW><<<grid, WW * 32, 0, stream>>>(s, scale, E, chunks, ids, q, cent, vsum,
                                                                              sizes, work);
    else
        estimate_partial_vec_kernel<PER, G, kEstWarps><<<grid, kEstWarps * 32, 0, stream>>>(s, scale, E, chunks, ids, q,
                                                                                            cent, vsum, sizes, work);
}

template <int PER>
void launch_estimate_vec(const ClusterScoreShape& s, float scale, int E, int chunks, const int32_t* ids, const float* q,
                         const uint16_t* cent, const uint16_t* vsum, const int32_t* sizes, float* work,
                         cudaStream_t stream) {
    if (s.group == 1)
        launch_estimate_vec_group<PER, 1>(s, scale, E, chunks, ids, q, cent, vsum, sizes, work, stream);
    else if (s.group == 2)
        launch_estimate_vec_group<PER, 2>(s, scale, E, chunks, ids, q, cent, vsum, sizes, work, stream);
    else if (s.group <= 4)
        launch_estimate_vec_group<PER, 4>(s, scale, E, chunks, ids, q, cent, vsum, sizes, work, stream);
    else
        launch_estimate_vec_group<PER, 8>(s, scale, E, chunks, ids, q, cent, vsum, sizes, work, stream);
}

int estimate_chunks(int E) { return std::max(1, (E + kEstChunk - 1) / kEstChunk); }

}  // namespace

size_t estimate_workspace_floats(const ClusterScoreShape& s, int E) {
    check_cluster_shape(s);
    return (size_t)s.batch * s.kv_heads * s.group * estimate_chunks(std::max(E, 0)) * (s.d + 2);
}

void estimate_attention(const ClusterScoreShape& s, int E, const int32_t* ids, const float* q,
                        const uint16_t* cent, const uint16_t* vsum, const int32_t* sizes, float* out, float* lse,
                        float* work, void* stream) {
    check_cluster_shape(s);
    if (E < 0) throw ParamError("cuda estimate_attention: E < 0");
    const int chunks = estimate_chunks(E);
    if (E > 0) {
        const float scale = default_scale(s.scale, s.d);
        switch (s.d) {  // 8/16-byte loads where d = 32 * {2, 4, 8}, else the first version
            case 64: launch_estimate_vec<2>(s, scale, E, chunks, ids, q, cent, vsum, sizes, work, st(stream)); break;
            case 128: launch_estimate_vec<4>(s, scale, E, chunks, ids, q, cent, vsum, sizes, work, st(stream)); break;
            case 256: launch_estimate_vec<8>(s, scale, E, chunks, ids, q, cent, vsum, sizes, work, st(stream)); break;
            default:
                estimate_partial_kernel<<<dim3(chunks, s.batch * s.kv_heads), kEstWarps * 32, 0, st(stream)>>>(
                    s, scale, E, chunks, ids, q, cent, vsum, sizes, work);
        }
        check_launch("estimate_partial");
    }
    // the chunks' states merged as decode splits are: chunks "splits" of one token each
    DecodeShape cs;
    cs.batch = s.batch, cs.kv_heads = s.kv_heads, cs.group = s.group, cs.d = s.d;
    cs.capacity = E > 0 ? chunks : 0, cs.split = 1;
    decode_combine_kernel<<<s.batch * s.kv_heads * s.group, s.d, 0, st(stream)>>>(cs, work, nullptr, nullptr, out,
                                                                                   lse);
    check_launch("estimate_combine");
}

// ---------------------------------------------------------------------------------------------------
// Segment copies (execution buffer, admission scatter)
// ---------------------------------------------------------------------------------------------------

namespace {

constexpr int kCopyTokensPerBlock = 64;

// grid (n segments, ceil(max tokens / 64)): block (x, y) copies tokens [y*64, y*64+64) of segment x, keys and
// values, 16 bytes per thread per step. Reading src through UVA makes pinned host sources zero-copy.
__global__ void copy_segments_kernel(const CopySegment* segs, int d) {
    const CopySegment sg = segs[blockIdx.x];
    const int64_t t0 = (int64_t)blockIdx.y * kCopyTokensPerBlock;
    if (t0 >= sg.tokens) return;
    const int64_t t1 = min(sg.tokens, t0 + kCopyTokensPerBlock);
    const int vec_per_token = d / 8;  // uint4 = 8 halves
    const int64_t n = (t1 - t0) * vec_per_token;
    const uint4* sk = reinterpret_cast<const uint4*>(sg.src_k) + t0 * vec_per_token;
    const uint4* sv = reinterpret_cast<const uint4*>(sg.src_v) + t0 * vec_per_token;
    uint4* dk = reinterpret_cast<uint4*>(sg.dst_k) + t0 * vec_per_token;
    uint4* dv = reinterpret_cast<uint4*>(sg.dst_v) + t0 * vec_per_token;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        dk[i] = sk[i];
        dv[i] = sv[i];
    }
}

}  // namespace

void copy_segments(const CopySegment* segs, int n, int d, int64_t max_tokens, void* stream) {
    if (d % 8 != 0) throw ParamError("cuda copy_segments: d must be a multiple of 8");
    if (n == 0 || max_tokens <= 0) return;
    const int64_t chunks = (max_tokens + kCopyTokensPerBlock - 1) / kCopyTokensPerBlock;
    if (chunks > 65535) throw ParamError("cuda copy_segments: a segment over 4M tokens");
    copy_segments_kernel<<<dim3((unsigned)n, (unsigned)chunks), 256, 0, st(stream)>>>(segs, d);
    check_launch("copy_segments");
}

// ---------------------------------------------------------------------------------------------------
// Execution buffers from the ranked clusters on the device (wave with its KV in device memory)
// ---------------------------------------------------------------------------------------------------

namespace {

constexpr int kGatherThreads = 256, kGatherUnroll = 4;
// blocks per pair: enough for ~1024 blocks in all (8 per SM on a 132-SM part), 2..64 per pair; the first
// version's fixed 16 gave a batch-1 step (8 pairs) 128 blocks each walking its ~10 clusters one
// dependent load-store round trip at a time: 31 us for ~10 MB at 128K (H200)
int gather_blocks_per_pair(int bh) { return std::max(2, std::min(64, 1024 / std::max(bh, 1))); }

// grid (gather_blocks_per_pair(bh), bh), block 256, dynamic shared memory 2r ints. Every block of a pair
// scans the sizes of the pair's r ranked clusters (their first destination rows, a block scan; a few
// hundred loads, cheaper to redo per block than a second launch) and their source rows, then copies the
// pair's destination rows as one flat range of 16-byte pieces over all its blocks: piece e is row e / vec
// of the execution buffer, whose cluster is the last one starting at or before it (a binary search over
// the rows in shared memory; empty clusters share their start with the next and lose to it), kGatherUnroll
// pieces' loads in flight per thread before their stores. Block 0 writes the pair's length.
__global__ void __launch_bounds__(kGatherThreads)
    gather_clusters_kernel(GatherShape s, int steady, const int32_t* __restrict__ ranked,
                           const int32_t* __restrict__ sizes, const int32_t* __restrict__ offsets,
                           const uint16_t* __restrict__ store_k, const uint16_t* __restrict__ store_v,
                           uint16_t* __restrict__ xk, uint16_t* __restrict__ xv, int32_t* __restrict__ lens) {
    using Scan = cub::BlockScan<int, kGatherThreads>;
    __shared__ typename Scan::TempStorage scan;
    extern __shared__ int gather_smem[];
    int* row = gather_smem;         // [r] first row after the steady zone, rank order
    int* src = gather_smem + s.r;   // [r] first row in the pair's store
    const int p = blockIdx.y, tid = threadIdx.x;
    const int32_t* rk = ranked + (size_t)p * s.clusters;
    const int32_t* sz = sizes + (size_t)p * s.clusters;
    const int32_t* of = offsets + (size_t)p * s.clusters;
    const int per = (s.r + kGatherThreads - 1) / kGatherThreads, i0 = tid * per, i1 = min(s.r, i0 + per);
    int sum = 0;
    for (int i = i0; i < i1; ++i) sum += sz[rk[i]];
    int first = 0, total = 0;
    Scan(scan).ExclusiveSum(sum, first, total);
    if (blockIdx.x == 0 && tid == 0) lens[p] = min(s.capacity, steady + total);
    for (int i = i0; i < i1; ++i) {
        const int c = rk[i];
        row[i] = first, src[i] = of[c], first += sz[c];
    }
    __syncthreads();
    const int vec = s.d / 8;  // uint4 = 8 halves
    const int64_t rows = min(total, s.capacity - steady), pieces = rows * vec;
    const int64_t stride = (int64_t)gridDim.x * kGatherThreads;
    const uint4* sk = reinterpret_cast<const uint4*>(store_k) + (int64_t)p * s.tokens * vec;
    const uint4* sv = reinterpret_cast<const uint4*>(store_v) + (int64_t)p * s.tokens * vec;
    uint4* dk = reinterpret_cast<uint4*>(xk) + ((int64_t)p * s.capacity + steady) * vec;
    uint4* dv = reinterpret_cast<uint4*>(xv) + ((int64_t)p * s.capacity + steady) * vec;
    for (int64_t e0 = (int64_t)blockIdx.x * kGatherThreads + tid; e0 < pieces; e0 += kGatherUnroll * stride) {
        uint4 k[kGatherUnroll], v[kGatherUnroll];
#pragma unroll
        for (int u = 0; u < kGatherUnroll; ++u) {
            const int64_t e = e0 + u * stride;
            if (e >= pieces) break;
            const int r = (int)(e / vec);
            int lo = 0, hi = s.r - 1;  // the last cluster starting at or before row r (row[0] = 0)
            while (lo < hi) {
                const int mid = (lo + hi + 1) >> 1;
                if (row[mid] <= r) lo = mid;
                else hi = mid - 1;
            }
            const int64_t at = (int64_t)(src[lo] + (r - row[lo])) * vec + e % vec;
            k[u] = sk[at], v[u] = sv[at];
        }
#pragma unroll
        for (int u = 0; u < kGatherUnroll; ++u) {
            const int64_t e = e0 + u * stride;
            if (e >= pieces) break;
            dk[e] = k[u], dv[e] = v[u];
        }
    }
}

}  // namespace

void gather_clusters(const GatherShape& s, int steady, const int32_t* ranked, const int32_t* sizes,
                     const int32_t* offsets, const uint16_t* store_k, const uint16_t* store_v, uint16_t* xk,
                     uint16_t* xv, int32_t* lens, void* stream) {
    if (s.d % 8 != 0 || s.bh < 1 || s.bh > 65535 || s.r < 0 || s.r > s.clusters || s.r > kMaxGatherClusters ||
        steady < 0 || steady > s.capacity)
        throw ParamError("cuda gather_clusters: bad shape (d a multiple of 8, 1..65535 pairs, r <= clusters and <= " +
                         std::to_string(kMaxGatherClusters) + ", steady <= capacity)");
    const int blocks = gather_blocks_per_pair(s.bh);
    const size_t smem = 2 * (size_t)s.r * sizeof(int);
    static bool raised = false;  // past 48 KB of dynamic shared memory (r > 6144): once per process
    if (!raised && smem > 48 * 1024) {
        const cudaError_t e = cudaFuncSetAttribute(gather_clusters_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   (int)(2 * kMaxGatherClusters * sizeof(int)));
        if (e != cudaSuccess) throw Error(std::string("cuda: gather_clusters smem: ") + cudaGetErrorString(e));
        raised = true;
    }
    gather_clusters_kernel<<<dim3((unsigned)blocks, (unsigned)s.bh), kGatherThreads, smem, st(stream)>>>(
        s, steady, ranked, sizes, offsets, store_k, store_v, xk, xv, lens);
    check_launch("gather_clusters");
}

// ---------------------------------------------------------------------------------------------------
// Flash-decoding
// ---------------------------------------------------------------------------------------------------

namespace {

constexpr int kDecodeThreads = 128;

// grid (splits, B*Hkv), block 128. A token is handled by TPT = d/8 consecutive lanes, each holding 8
// dims (one 16-byte load of keys and of values); the block walks its split NS = 128/TPT tokens at a
// time. Each lane group keeps an online-softmax state per query head of the group, so K/V are read
// once for all g heads. The block then merges its lane groups and writes one partial (m, l, acc[d]) per
// query head and split: work[b, qh, split, 0] = m, [1] = l, [2 + e] = acc[e].
template <int G>  // G >= group: register arrays sized for the group (occupancy), 1/2/4/8
__global__ void decode_split_kernel(DecodeShape s, float scale, const float* q, const uint16_t* K,
                                    const uint16_t* V, const int32_t* lens, float* work) {
    extern __shared__ float sh[];
    const int split = blockIdx.x, bk = blockIdx.y;
    const int b = bk / s.kv_heads, kvh = bk % s.kv_heads, g = s.group, d = s.d;
    const int TPT = d / 8, NS = kDecodeThreads / TPT;
    const int slot = threadIdx.x / TPT, part = threadIdx.x % TPT;
    const int len = lens ? min(lens[bk], s.capacity) : s.capacity;
    const int t_begin = split * s.split, t_end = min(len, t_begin + s.split);

    float qr[G][8], acc[G][8], m[G], l[G];
#pragma unroll
    for (int h = 0; h < G; ++h) {
        m[h] = -INFINITY, l[h] = 0;
        for (int i = 0; i < 8; ++i) {
            acc[h][i] = 0;
            qr[h][i] = h < g ? q[((size_t)b * s.kv_heads * g + (size_t)kvh * g + h) * d + part * 8 + i] : 0.0f;
        }
    }
    const size_t row0 = (size_t)bk * s.capacity;
    // base is uniform across the block so every lane runs the same number of iterations (the shuffles
    // below need the whole lane group present)
    constexpr int U = 2;  // tokens per lane group per iteration: both loads are issued before the math
    for (int base = t_begin; base < t_end; base += NS * U) {
        float kf[U][8], vf[U][8];
        bool ok[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int t = base + u * NS + slot;
            ok[u] = t < t_end;
            if (ok[u]) {
                const uint4 kk = *reinterpret_cast<const uint4*>(K + (row0 + t) * d + part * 8);
                const uint4 vv = *reinterpret_cast<const uint4*>(V + (row0 + t) * d + part * 8);
                const __half2* k2 = reinterpret_cast<const __half2*>(&kk);
                const __half2* v2 = reinterpret_cast<const __half2*>(&vv);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float2 a = __half22float2(k2[i]), c = __half22float2(v2[i]);
                    kf[u][2 * i] = a.x, kf[u][2 * i + 1] = a.y, vf[u][2 * i] = c.x, vf[u][2 * i + 1] = c.y;
                }
            } else {
#pragma unroll
                for (int i = 0; i < 8; ++i) kf[u][i] = 0, vf[u][i] = 0;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
#pragma unroll
            for (int h = 0; h < G; ++h) {
                if (h >= g) break;
                float dot = 0;
#pragma unroll
                for (int i = 0; i < 8; ++i) dot += qr[h][i] * kf[u][i];
                for (int o = TPT / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o, TPT);
                if (ok[u]) {
                    const float sc = scale * dot;
                    const float mn = fmaxf(m[h], sc);
                    const float corr = __expf(m[h] - mn), p = __expf(sc - mn);
                    l[h] = l[h] * corr + p;
#pragma unroll
                    for (int i = 0; i < 8; ++i) acc[h][i] = acc[h][i] * corr + p * vf[u][i];
                    m[h] = mn;
                }
            }
        }
    }
    // shared: m [NS][g], l [NS][g], acc [NS][g][d]
    float* sm = sh;
    float* sl = sm + NS * g;
    float* sa = sl + NS * g;
#pragma unroll
    for (int h = 0; h < G; ++h) {  // constant bound: acc stays in registers (see estimate_kernel)
        if (h >= g) break;
        if (part == 0) sm[slot * g + h] = m[h], sl[slot * g + h] = l[h];
#pragma unroll
        for (int i = 0; i < 8; ++i) sa[((size_t)slot * g + h) * d + part * 8 + i] = acc[h][i];
    }
    __syncthreads();
    const int splits = (s.capacity + s.split - 1) / s.split;  // DecodeShape::splits() is host code
    for (int idx = threadIdx.x; idx < g * d; idx += blockDim.x) {
        const int h = idx / d, e = idx % d;
        float M_ = -INFINITY;
        for (int w = 0; w < NS; ++w)
            if (sl[w * g + h] > 0) M_ = fmaxf(M_, sm[w * g + h]);
        float L = 0, A = 0;
        if (M_ != -INFINITY)
            for (int w = 0; w < NS; ++w)
                if (sl[w * g + h] > 0) {
                    const float f = __expf(sm[w * g + h] - M_);
                    L += sl[w * g + h] * f;
                    A += sa[((size_t)w * g + h) * d + e] * f;
                }
        const size_t qh = (size_t)b * s.kv_heads * g + (size_t)kvh * g + h;
        float* wp = work + (qh * splits + split) * (size_t)(d + 2);
        if (e == 0) wp[0] = M_, wp[1] = L;
        wp[2 + e] = A;
    }
}

// grid B*Hq, block d: LSE merge of the splits' partials and the optional extra (out, lse) partial.
__global__ void decode_combine_kernel(DecodeShape s, const float* work, const float* extra_out,
                                      const float* extra_lse, float* out, float* lse) {
    const int qh = blockIdx.x, e = threadIdx.x, d = s.d, splits = (s.capacity + s.split - 1) / s.split;
    const float* wp = work + (size_t)qh * splits * (d + 2);
    float M_ = -INFINITY;
    for (int i = 0; i < splits; ++i)
        if (wp[(size_t)i * (d + 2) + 1] > 0) M_ = fmaxf(M_, wp[(size_t)i * (d + 2)]);
    const bool has_extra = extra_lse != nullptr && extra_lse[qh] != -INFINITY;
    if (has_extra) M_ = fmaxf(M_, extra_lse[qh]);  // the extra partial is (m = lse, l = 1, acc = out)
    float L = 0, A = 0;
    if (M_ != -INFINITY) {
        for (int i = 0; i < splits; ++i) {
            const float* p = wp + (size_t)i * (d + 2);
            if (p[1] > 0) {
                const float f = __expf(p[0] - M_);
                L += p[1] * f;
                A += p[2 + e] * f;
            }
        }
        if (has_extra) {
            const float f = __expf(extra_lse[qh] - M_);
            L += f;
            A += extra_out[(size_t)qh * d + e] * f;
        }
    }
    out[(size_t)qh * d + e] = L > 0 ? A / L : 0.0f;
    if (e == 0 && lse) lse[qh] = L > 0 ? M_ + logf(L) : -INFINITY;
}

void check_decode_shape(const DecodeShape& s) {
    if (s.batch < 1 || s.kv_heads < 1 || s.group < 1 || s.group > kMaxGroup || s.capacity < 0 || s.split < 1 ||
        !(s.d == 64 || s.d == 128 || s.d == 256))
        throw ParamError("cuda decode_attention: bad shape (group 1-8, d 64/128/256, split >= 1)");
}

}  // namespace

size_t decode_workspace_floats(const DecodeShape& s) {
    check_decode_shape(s);
    return (size_t)s.batch * s.kv_heads * s.group * std::max(1, s.splits()) * (s.d + 2);
}

void decode_attention(const DecodeShape& s, const float* q, const uint16_t* K, const uint16_t* V,
                      const int32_t* lens, const float* extra_out, const float* extra_lse, float* out, float* lse,
                      float* work, void* stream) {
    check_decode_shape(s);
    const int splits = (s.capacity + s.split - 1) / s.split;  // DecodeShape::splits() is host code
    const float scale = default_scale(s.scale, s.d);
    if (splits > 0) {
        const int NS = kDecodeThreads / (s.d / 8);
        const size_t shmem = (size_t)NS * s.group * (s.d + 2) * sizeof(float);
        const dim3 grid(splits, s.batch * s.kv_heads);
        if (s.group == 1) decode_split_kernel<1><<<grid, kDecodeThreads, shmem, st(stream)>>>(s, scale, q, K, V, lens, work);
        else if (s.group == 2) decode_split_kernel<2><<<grid, kDecodeThreads, shmem, st(stream)>>>(s, scale, q, K, V, lens, work);
        else if (s.group <= 4) decode_split_kernel<4><<<grid, kDecodeThreads, shmem, st(stream)>>>(s, scale, q, K, V, lens, work);
        else decode_split_kernel<8><<<grid, kDecodeThreads, shmem, st(stream)>>>(s, scale, q, K, V, lens, work);
        check_launch("decode_split");
    }
    decode_combine_kernel<<<s.batch * s.kv_heads * s.group, s.d, 0, st(stream)>>>(s, work, extra_out, extra_lse,
                                                                                  out, lse);
    check_launch("decode_combine");
}

// ---------------------------------------------------------------------------------------------------
// Conversions (convert.hpp)
// ---------------------------------------------------------------------------------------------------

namespace {
__global__ void narrow_kernel(const float* src, __half* dst, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __float2half_rn(src[i]);
}
__global__ void widen_kernel(const __half* src, float* dst, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __half2float(src[i]);
}
__global__ void fill_int32_kernel(int32_t* dst, int32_t v, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = v;
}
unsigned blocks_for(size_t n) { return (unsigned)((n + 255) / 256); }
}  // namespace

// ---------------------------------------------------------------------------------------------------
// The launch gate (cuda_api.hpp LaunchGate)
// ---------------------------------------------------------------------------------------------------

namespace {
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
// One thread polls the host's flag through the mapped page (a PCIe read per poll, ~1 us apart).
__global__ void gate_kernel(volatile int32_t* flag, unsigned long long timeout_ns) {
    const unsigned long long t0 = global_ns();
    while (flag[0] == 0) {
        if (global_ns() - t0 > timeout_ns) {
            flag[1] = 1;
            break;
        }
        __nanosleep(1000);
    }
}
}  // namespace

LaunchGate::LaunchGate(double timeout_us) : timeout_us_(timeout_us) {
    if (!(timeout_us > 0)) throw ParamError("cuda LaunchGate: timeout_us must be positive");
    flag_ = static_cast<int32_t*>(pinned_alloc(2 * sizeof(int32_t)));
    flag_[0] = 1, flag_[1] = 0;
}
LaunchGate::~LaunchGate() { pinned_free(flag_); }
void LaunchGate::hold(void* stream) {
    volatile int32_t* f = flag_;
    f[0] = 0, f[1] = 0;
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the cleared flag is visible before the launch
    gate_kernel<<<1, 1, 0, st(stream)>>>(f, (unsigned long long)(timeout_us_ * 1e3));
    check_launch("launch_gate");
}
void LaunchGate::release() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    static_cast<volatile int32_t*>(flag_)[0] = 1;
}
bool LaunchGate::timed_out() const { return static_cast<volatile int32_t*>(flag_)[1] != 0; }

void narrow_to_half(const float* src, uint16_t* dst, size_t n, void* stream) {
    if (n == 0) return;
    narrow_kernel<<<blocks_for(n), 256, 0, st(stream)>>>(src, reinterpret_cast<__half*>(dst), n);
    check_launch("narrow_to_half");
}
void widen_from_half(const uint16_t* src, float* dst, size_t n, void* stream) {
    if (n == 0) return;
    widen_kernel<<<blocks_for(n), 256, 0, st(stream)>>>(reinterpret_cast<const __half*>(src), dst, n);
    check_launch("widen_from_half");
}
void fill_int32(int32_t* dst, int32_t v, size_t n, void* stream) {
    if (n == 0) return;
    fill_int32_kernel<<<blocks_for(n), 256, 0, st(stream)>>>(dst, v, n);
    check_launch("fill_int32");
}

}  // namespace retro::cuda
