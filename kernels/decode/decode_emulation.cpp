// Part of the CPU emulation of cuda_api.hpp (docs/cuda.md, "CPU emulation"): float32 like the kernels but
// written independently of them and of the lib/ references; "device" memory is host memory, launches queued
// on their streams (common/emulation_streams.hpp). Linked with the check bodies into retro_check_emulation
// (and with the run path into retro_backend_emulation), it tests the checks themselves (input layouts,
// references, tolerances, poisoning) on machines without a GPU. It says nothing about the CUDA kernels.
// This file: flash-decoding (decode_api.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/emulation_streams.hpp"
#include "common/emulation_trace.hpp"
#include "common/registry.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

static float h(uint16_t b) { return half_to_float(b); }
size_t decode_workspace_floats(const DecodeShape&) { return 4; }

namespace {

/// row(bk, t): the row of sequence bk's token t in K, V.
template <class Row>
void emulate_decode(const DecodeShape& s, const Row& row_of, const float* q, const uint16_t* K, const uint16_t* V,
                    const int32_t* lens, const float* xo, const float* xl, float* out, float* lse) {
    const float sc = s.scale ? s.scale : 1 / std::sqrt((float)s.d);
    const int g = s.group, d = s.d;
    for (int bk = 0; bk < s.batch * s.kv_heads; ++bk) {
        int b = bk / s.kv_heads, kvh = bk % s.kv_heads;
        int len = lens ? std::min(lens[bk], s.capacity) : s.capacity;
        for (int hh = 0; hh < g; ++hh) {
            size_t qh = (size_t)b * s.kv_heads * g + kvh * g + hh;
            float m = -INFINITY, l = 0;
            std::vector<float> acc(d, 0);
            auto add = [&](float x, float w, const float* v) {
                float mn = std::max(m, x), corr = std::exp(m - mn), p = std::exp(x - mn);
                l = l * corr + w * p;
                for (int e = 0; e < d; ++e) acc[e] = acc[e] * corr + p * v[e];
                m = mn;
            };
            std::vector<float> v(d);
            for (int t = 0; t < len; ++t) {
                float dot = 0;
                const size_t row = row_of(bk, t) * d;
                for (int e = 0; e < d; ++e) dot += q[qh * d + e] * h(K[row + e]), v[e] = h(V[row + e]);
                add(sc * dot, 1, v.data());
            }
            if (xl && xl[qh] != -INFINITY) add(xl[qh], 1, xo + qh * d);
            for (int e = 0; e < d; ++e) out[qh * d + e] = l > 0 ? acc[e] / l : 0;
            if (lse) lse[qh] = l > 0 ? m + std::log(l) : -INFINITY;
        }
    }
}

}  // namespace

void decode_attention(const DecodeShape& s, const float* q, const uint16_t* K, const uint16_t* V, const int32_t* lens,
                      const float* xo, const float* xl, float* out, float* lse, float* work, void* st) {
    emu::kernel("decode_attention", s, q, K, V, lens, xo, xl, out, lse, work);
    emu::enqueue(st, [=] {
        const auto row = [&](int bk, int t) { return (size_t)bk * s.capacity + t; };
        emulate_decode(s, row, q, K, V, lens, xo, xl, out, lse);
    });
}

void decode_attention_pages(const DecodeShape& s, const float* q, const uint16_t* K, const uint16_t* V,
                            const int32_t* pages, int page, int stride, const int32_t* lens, float* out, float* lse,
                            float* work, void* st) {
    emu::kernel("decode_attention_pages", s, q, K, V, pages, page, stride, lens, out, lse, work);
    if (!pages || !lens || page < 1 || stride < 1 || s.capacity > (long)page * stride)  // as the kernel's launcher
        throw ParamError("cuda decode_attention_pages: a page table and lengths are needed, page >= 1 and "
                         "capacity <= page * page_stride");
    emu::enqueue(st, [=] {
        const auto row = [&](int bk, int t) { return (size_t)pages[(size_t)bk * stride + t / page] * page + t % page; };
        emulate_decode(s, row, q, K, V, lens, nullptr, nullptr, out, lse);
    });
}

RETRO_KERNEL_EMULATION(decode);

}  // namespace retro::cuda
