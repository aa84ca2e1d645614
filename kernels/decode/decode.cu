// Flash-decoding over KV in GPU memory (decode_api.hpp: decode_attention): split over the sequence, the
// splits' partial states merged by LSE together with an optional extra state (decode_combine.hpp).
// Written for clarity first (docs/cuda.md): fp16 loads, float32 arithmetic, one online-softmax state
// per (query head, lane group).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "common/device.cuh"
#include "core/error.hpp"
#include "cuda_api.hpp"
#include "decode/decode_combine.hpp"

namespace retro::cuda {

// ---------------------------------------------------------------------------------------------------
// Flash-decoding
// ---------------------------------------------------------------------------------------------------

namespace {

constexpr int kDecodeThreads = 128;

/// Where sequence bk's token t lives in K and V: row bk * capacity + t (decode_attention), or through a
/// page table (decode_attention_pages: row pages[bk * stride + t / page] * page + t % page of the pool).
struct RowMap {
    const int32_t* pages = nullptr;
    int page = 1, stride = 0;
    __device__ size_t row(int bk, size_t row0, int t) const {
        return pages ? (size_t)pages[(size_t)bk * stride + t / page] * page + t % page : row0 + t;
    }
};

// grid (splits, B*Hkv), block 128. A token is handled by TPT = d/8 consecutive lanes, each holding 8
// dims (one 16-byte load of keys and of values); the block walks its split NS = 128/TPT tokens at a
// time. Each lane group keeps an online-softmax state per query head of the group, so K/V are read
// once for all g heads. The block then merges its lane groups and writes one partial (m, l, acc[d]) per
// query head and split: work[b, qh, split, 0] = m, [1] = l, [2 + e] = acc[e].
template <int G>  // G >= group: register arrays sized for the group (occupancy), 1/2/4/8
__global__ void decode_split_kernel(DecodeShape s, RowMap map, float scale, const float* q, const uint16_t* K,
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
                const size_t row = map.row(bk, row0, t);
                const uint4 kk = *reinterpret_cast<const uint4*>(K + row * d + part * 8);
                const uint4 vv = *reinterpret_cast<const uint4*>(V + row * d + part * 8);
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

}  // namespace

void launch_decode_combine(const DecodeShape& s, const float* work, const float* extra_out, const float* extra_lse,
                           float* out, float* lse, cudaStream_t stream, const char* what) {
    decode_combine_kernel<<<s.batch * s.kv_heads * s.group, s.d, 0, stream>>>(s, work, extra_out, extra_lse, out,
                                                                            lse);
    check_launch(what);
}

namespace {

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

namespace {

void launch_decode(const DecodeShape& s, RowMap map, const float* q, const uint16_t* K, const uint16_t* V,
                   const int32_t* lens, const float* extra_out, const float* extra_lse, float* out, float* lse,
                   float* work, void* stream) {
    check_decode_shape(s);
    const int splits = (s.capacity + s.split - 1) / s.split;  // DecodeShape::splits() is host code
    const float scale = default_scale(s.scale, s.d);
    if (splits > 0) {
        const int NS = kDecodeThreads / (s.d / 8);
        const size_t shmem = (size_t)NS * s.group * (s.d + 2) * sizeof(float);
        const dim3 grid(splits, s.batch * s.kv_heads);
        const auto a = [&](auto kernel) { kernel<<<grid, kDecodeThreads, shmem, st(stream)>>>(s, map, scale, q, K, V, lens, work); };
        if (s.group == 1) a(decode_split_kernel<1>);
        else if (s.group == 2) a(decode_split_kernel<2>);
        else if (s.group <= 4) a(decode_split_kernel<4>);
        else a(decode_split_kernel<8>);
        check_launch("decode_split");
    }
    launch_decode_combine(s, work, extra_out, extra_lse, out, lse, st(stream), "decode_combine");
}

}  // namespace

void decode_attention(const DecodeShape& s, const float* q, const uint16_t* K, const uint16_t* V,
                      const int32_t* lens, const float* extra_out, const float* extra_lse, float* out, float* lse,
                      float* work, void* stream) {
    launch_decode(s, RowMap{}, q, K, V, lens, extra_out, extra_lse, out, lse, work, stream);
}

void decode_attention_pages(const DecodeShape& s, const float* q, const uint16_t* K, const uint16_t* V,
                            const int32_t* pages, int page, int page_stride, const int32_t* lens, float* out,
                            float* lse, float* work, void* stream) {
    if (!pages || !lens || page < 1 || page_stride < 1 || s.capacity > (long)page * page_stride)
        throw ParamError("cuda decode_attention_pages: a page table and lengths are needed, page >= 1 and "
                         "capacity <= page * page_stride");
    launch_decode(s, RowMap{pages, page, page_stride}, q, K, V, lens, nullptr, nullptr, out, lse, work, stream);
}

}  // namespace retro::cuda
