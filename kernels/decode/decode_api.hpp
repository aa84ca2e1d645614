#pragma once
// Host API of the flash-decoding kernel (kernels/cuda_api.hpp, docs/cuda.md): decode/decode.cu; CPU
// emulation decode/decode_emulation.cpp, check decode/decode_checks.cpp, microbenchmark
// decode/decode_bench.cpp.
#include <cstddef>
#include <cstdint>

namespace retro::cuda {

// ---- decode attention (flash-decoding, decode/decode.cu; CPU reference: lib/attention partial_attention_ids + merge) ----

struct DecodeShape {
    int batch = 1;
    int kv_heads = 1;
    int group = 1;      ///< <= 8
    int d = 128;        ///< 64, 128 or 256
    int capacity = 0;   ///< token rows per (b, kv head) in K/V (the row stride)
    int split = 512;    ///< tokens per split (one block each)
    float scale = 0;    ///< 1/sqrt(d) when 0
    int splits() const { return (capacity + split - 1) / split; }
};

/// Floats of workspace decode_attention needs: B * Hkv*g * splits * (d + 2).
size_t decode_workspace_floats(const DecodeShape& s);

/// out = attention of each query head over its KV head's first lens[b*Hkv + kvh] tokens (all capacity
/// when d_lens is null), merged by LSE with an extra partial (d_extra_out, d_extra_lse: the estimation
/// zone) when given. d_q: [B, Hkv*g, d] f32; d_k, d_v: [B*Hkv, capacity, d] fp16;
/// d_lens: [B*Hkv] int32 or null; d_extra_out: [B, Hkv*g, d] f32 or null; d_extra_lse: [B, Hkv*g] or null;
/// d_out: [B, Hkv*g, d] f32; d_lse: [B, Hkv*g] f32 or null; d_work: decode_workspace_floats(s) floats.
void decode_attention(const DecodeShape& s, const float* d_q, const uint16_t* d_k, const uint16_t* d_v,
                      const int32_t* d_lens, const float* d_extra_out, const float* d_extra_lse,
                      float* d_out, float* d_lse, float* d_work, void* stream = nullptr);

/// decode_attention over page lists (Quest's attention over its chosen pages): sequence bk's token t is
/// row d_pages[bk * page_stride + t / page] * page + t % page of d_k, d_v viewed as one pool of rows
/// [*, d] fp16; its length d_lens[bk] (<= s.capacity <= page_stride * page). d_pages: [B*Hkv,
/// page_stride] int32; the rest as decode_attention's, without the extra partial.
void decode_attention_pages(const DecodeShape& s, const float* d_q, const uint16_t* d_k, const uint16_t* d_v,
                            const int32_t* d_pages, int page, int page_stride, const int32_t* d_lens, float* d_out,
                            float* d_lse, float* d_work, void* stream = nullptr);

}  // namespace retro::cuda
