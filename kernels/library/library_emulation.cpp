// Part of the CPU emulation of cuda_api.hpp (docs/cuda.md, "CPU emulation"): float32 like the kernels but
// written independently of them and of the lib/ references; "device" memory is host memory, launches queued
// on their streams (common/emulation_streams.hpp). Linked with the check bodies into retro_check_emulation
// (and with the run path into retro_backend_emulation), it tests the checks themselves (input layouts,
// references, tolerances, poisoning) on machines without a GPU. It says nothing about the CUDA kernels.
// This file: the library baselines (library_api.hpp), over the emulated decode_attention.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/emulation_streams.hpp"
#include "common/emulation_trace.hpp"
#include "common/registry.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

// LibraryDecode: FlashInfer's shape rules, the attention by the emulated decode_attention (fp16 output
// rounding as the library's fp16 output).
std::string library_decode_unsupported(int d, int g) {
    if (d != 64 && d != 128) return "FlashInfer decode is built here for head_dim 64 and 128, not " + std::to_string(d);
    if (g != 1 && g != 2 && g != 3 && g != 4 && g != 6 && g != 8)
        return "FlashInfer decode supports GQA group sizes 1, 2, 3, 4, 6, 8, not " + std::to_string(g);
    return "";
}
struct LibraryDecode::Impl {
    DecodeShape s;
    int page = 16;
    std::vector<int32_t> lens;
    std::vector<int32_t> pages;  ///< plan_device's given page table [requests, stride], copied at the plan
    int stride = 0;
    int requests() const { return s.batch * s.kv_heads; }
    void check_lens(const int32_t* l) const {
        for (int i = 0; i < requests(); ++i)
            if (l[i] < 1 || l[i] > s.capacity) throw ParamError("library decode: length out of range");
    }
    void set_lens(const int32_t* l) {  // checked already
        lens.assign(l, l + requests());
        pages.clear(), stride = 0;
    }
};
LibraryDecode::LibraryDecode(const DecodeShape& s, int page) : impl_(nullptr) {
    const std::string why = library_decode_unsupported(s.d, s.group);
    if (!why.empty()) throw ParamError("library decode: " + why);
    if (page < 1 || s.capacity < 1 || s.capacity % page) throw ParamError("library decode: capacity not a multiple of the page");
    impl_ = new Impl{s, page, {}, {}, 0};
}
LibraryDecode::~LibraryDecode() {
    emu::run_all();  // a queued run may still read the plan
    delete impl_;
}
// The host's plan reads the lengths at the call; the plan it makes is uploaded on the stream, in order
// with the runs queued before it.
void LibraryDecode::plan(const int32_t* lens, void* st) {
    impl_->check_lens(lens);
    Impl* impl = impl_;
    std::vector<int32_t> h(lens, lens + impl->requests());
    emu::enqueue(st, [impl, h] { impl->set_lens(h.data()); });
}
// The device's plan reads the lengths (and the page table) from device memory when it runs.
void LibraryDecode::plan_device(const int32_t* lens, void* st, int max_tiles, const int32_t* pages, int stride) {
    emu::kernel("library_plan_device", impl_, lens, max_tiles, pages, stride);
    if (pages && (stride < 1 || stride * impl_->page > impl_->s.capacity))
        throw ParamError("library decode: page table stride out of range");
    Impl* impl = impl_;
    emu::enqueue(st, [=] {
        impl->check_lens(lens);
        impl->set_lens(lens);
        if (!pages) return;
        const int n = impl->requests();
        for (int i = 0; i < n; ++i)
            if (impl->lens[(size_t)i] > stride * impl->page) throw ParamError("library decode: length past the page table");
        impl->pages.assign(pages, pages + (size_t)n * stride), impl->stride = stride;
    });
}
void LibraryDecode::run(const float* q, const uint16_t* K, const uint16_t* V, float* out, float* lse, void* st,
                        const float* xo, const float* xl) {
    emu::kernel("library_run", impl_, q, K, V, out, lse, xo, xl);
    Impl* impl = impl_;
    emu::enqueue(st, [=] {
        const emu::Quiet quiet;
        if (impl->lens.empty()) throw Error("library decode: run() before plan()");
        const DecodeShape& s = impl->s;
        const size_t rows = (size_t)s.batch * s.kv_heads * s.group, d = (size_t)s.d;
        std::vector<float> l(rows);
        if (impl->stride > 0) {  // the given pages where they lie
            DecodeShape ps = s;
            ps.capacity = impl->stride * impl->page;
            decode_attention_pages(ps, q, K, V, impl->pages.data(), impl->page, impl->stride, impl->lens.data(), out,
                                   l.data(), nullptr, st);
        } else {
            decode_attention(s, q, K, V, impl->lens.data(), nullptr, nullptr, out, l.data(), nullptr, st);
        }
        for (size_t i = 0; i < rows * d; ++i) out[i] = half_to_float(float_to_half(out[i]));  // the fp16 output
        for (size_t r = 0; r < rows; ++r) {  // the merge with a second state, in float (finish_kernel)
            if (xo && xl[r] != -INFINITY) {
                const float m = std::max(l[r], xl[r]), a = std::exp(l[r] - m), b = std::exp(xl[r] - m);
                for (size_t e = 0; e < d; ++e) out[r * d + e] = (out[r * d + e] * a + xo[r * d + e] * b) / (a + b);
                l[r] = m + std::log(a + b);
            }
            if (lse) lse[r] = l[r];
        }
    });
}
// CudnnDecode: cuDNN's shape rules (cudnn_decode.cpp), the attention by the emulated decode_attention
// over fp16-rounded queries and with the fp16 output rounding, each item's length for all its heads.
std::string cudnn_decode_unsupported(int d, int) {
    if (d % 8 != 0 || d > 256) return "cuDNN's fused attention takes head_dim a multiple of 8 up to 256, not " + std::to_string(d);
    return "";
}
struct CudnnDecode::Impl {
    DecodeShape s;
    CudnnDecodeOptions o;
};
CudnnDecode::CudnnDecode(const DecodeShape& s, const CudnnDecodeOptions& o) : impl_(nullptr) {
    const std::string why = cudnn_decode_unsupported(s.d, s.group);
    if (!why.empty()) throw ParamError("cudnn decode: " + why);
    if (o.exact_len < 0 || o.exact_len > s.capacity)
        throw ParamError("cudnn decode: exact_len " + std::to_string(o.exact_len) + " outside 0.." +
                         std::to_string(s.capacity) + " (the capacity)");
    impl_ = new Impl{s, o};
}
CudnnDecode::~CudnnDecode() {
    emu::run_all();
    delete impl_;
}
void CudnnDecode::run(const float* q, const uint16_t* K, const uint16_t* V, const int32_t* lens, float* out, float* lse,
                      void* st) {
    emu::kernel("cudnn_run", impl_, q, K, V, lens, out, lse);
    const Impl* impl = impl_;
    emu::enqueue(st, [=]() mutable {
        const emu::Quiet quiet;
        const DecodeShape& s = impl->s;
        const CudnnDecodeOptions& o = impl->o;
        const size_t rows = (size_t)s.batch * s.kv_heads * s.group, d = (size_t)s.d;
        std::vector<int32_t> per((size_t)s.batch * s.kv_heads);
        for (size_t i = 0; i < per.size(); ++i) {
            per[i] = o.exact_len > 0 ? o.exact_len : lens[i / (size_t)s.kv_heads];
            if (per[i] < 1 || per[i] > s.capacity) throw ParamError("cudnn decode: length out of range");
        }
        std::vector<float> no_stats(o.stats ? 0 : rows);  // without stats the caller's lse is left as it was
        if (!o.stats) lse = no_stats.data();
        std::vector<float> q16(q, q + rows * d);
        for (float& x : q16) x = half_to_float(float_to_half(x));
        decode_attention(s, q16.data(), K, V, per.data(), nullptr, nullptr, out, lse, nullptr, st);
        for (size_t i = 0; i < rows * d; ++i) out[i] = half_to_float(float_to_half(out[i]));
    });
}

RETRO_KERNEL_EMULATION(library);

}  // namespace retro::cuda
