// The wave step's estimation zone (wave_api.hpp: estimate_attention): RetroInfer Eq. 2-4 over the
// estimation clusters, in chunks whose states are merged as flash-decoding's splits are
// (decode/decode_combine.hpp).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "common/device.cuh"
#include "core/error.hpp"
#include "cuda_api.hpp"
#include "decode/decode_combine.hpp"
#include "wave/cluster_dots.cuh"

namespace retro::cuda {

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
    launch_decode_combine(cs, work, nullptr, nullptr, out, lse, st(stream), "estimate_combine");
}

}  // namespace retro::cuda
