#pragma once
// Device code shared by the wave step's ranking (cluster_rank.cu) and estimation (estimate.cu): fp16
// loads, the warp's transposed sums and the dot products of a few clusters with the group's queries,
// and the shape check of ClusterScoreShape.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/device.cuh"
#include "core/error.hpp"
#include "wave/wave_api.hpp"

namespace retro::cuda {

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

inline void check_cluster_shape(const ClusterScoreShape& s) {
    if (s.batch < 1 || s.kv_heads < 1 || s.group < 1 || s.group > kMaxGroup || s.clusters < 0 || s.d < 32 ||
        s.d > 256 || s.d % 32 != 0)
        throw ParamError("cuda cluster kernels: bad shape (group 1-8, d a multiple of 32 up to 256)");
}

}  // namespace retro::cuda
