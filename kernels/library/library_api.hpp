#pragma once
// Host API of the library baselines of full attention (kernels/cuda_api.hpp, docs/cuda.md): FlashInfer's
// batch decode (library/flashinfer_decode.cu) and cuDNN's fused attention (library/cudnn_decode.cpp),
// each with its stand-in for a build without the library's headers (library/*_absent.cpp). CPU
// emulation library/library_emulation.cpp, checks library/library_checks.cpp, microbenchmarks
// library/library_bench.cpp.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "decode/decode_api.hpp"

namespace retro::cuda {

// ---- library decode attention (library/flashinfer_decode.cu: FlashInfer's batch decode; the baseline) ----

/// "" when this build runs FlashInfer's decode kernel for head dim d and GQA group `group`; else why not
/// (a build without the FlashInfer headers, a head dim or group size it is not built for).
std::string library_decode_unsupported(int d, int group);

/// The most (b, kv head) requests LibraryDecode::plan_device schedules (its one-block schedule kernel).
constexpr int kLibraryDeviceRequests = 4096;

/// The device memory a LibraryDecode of shape s allocates that grows with the context: its page table and the
/// device-planned copy of it ([2 B*Hkv + 1 + B*Hkv * capacity / page_tokens] int32 each) and its fp16 output with
/// the base-2 LSEs. The split's tile buffers, bounded by the grid (the kernel's occupancy x the SMs), are left out.
inline size_t library_decode_bytes(const DecodeShape& s, int page_tokens) {
    const size_t requests = (size_t)s.batch * s.kv_heads;
    const size_t table = 2 * requests + 1 + requests * (size_t)(s.capacity / std::max(1, page_tokens));
    return 2 * table * sizeof(int32_t) + requests * s.group * ((size_t)s.d * sizeof(uint16_t) + sizeof(float));
}

/// Full attention per (batch item, KV head) by FlashInfer's batch decode kernel and its planner, over the
/// same KV layout as decode_attention, read in place as pages of `page_tokens` tokens.
/// K, V: [B*Hkv, capacity, d] fp16, capacity a multiple of page_tokens; q: [B, Hkv*g, d] f32;
/// out: [B, Hkv*g, d] f32; lse: [B, Hkv*g] f32 natural log (or null).
class LibraryDecode {
  public:
    /// Throws ParamError naming the shape when library_decode_unsupported(s.d, s.group) is not "".
    explicit LibraryDecode(const DecodeShape& s, int page_tokens = 16);
    ~LibraryDecode();
    LibraryDecode(const LibraryDecode&) = delete;
    LibraryDecode& operator=(const LibraryDecode&) = delete;
    /// Plans the split of each (b, kv head)'s h_lens[bk] visible tokens (1..capacity; h_lens: [B*Hkv]
    /// host memory) and uploads the page table on `stream`. Host work (FlashInfer's planner): call it
    /// before the timed region, once per step (a serving engine plans once per step for all layers).
    /// The previous plan's uploads must have completed (this rewrites the pinned tables they copy from):
    /// synchronize the stream between steps, as the layer runs do.
    void plan(const int32_t* h_lens, void* stream = nullptr);
    /// The lengths on the device (d_lens: [B*Hkv] int32, 1..capacity, written by an earlier kernel on
    /// `stream`): the page table and the schedule are built there by two small kernels, so nothing waits
    /// for the host (no planner, no read-back). The split is FlashInfer's planner's, computed there from
    /// the lengths: the smallest KV chunk (>= 128 tokens) whose tiles fit the kernel's grid (its
    /// occupancy x the SM count; no split when the B*Hkv requests alone fill it); max_tiles > 1 sizes the
    /// grid at B*Hkv*max_tiles instead (chunks from one page), 1 = unsplit. The launch is sized for the
    /// grid with the unused blocks masked off (FlashInfer's CUDA-graph padding) and the tiles merged by
    /// FlashInfer. At most kLibraryDeviceRequests requests. Replaces the last plan() until the next plan(); buffers are
    /// sized at the first call for a grid (call it once before timing).
    ///
    /// With d_pages ([requests, page_stride] int32 in device memory: decode_attention_pages' page table,
    /// each entry a page of the K/V pool viewed as [*, page_tokens, d]; request r's first
    /// ceil(d_lens[r] / page_tokens) entries read, every page but its last full) the requests attend those
    /// pages where they lie (Quest's chosen pages), copied into the plan's table now; capacity then bounds
    /// a request's pages (page_stride * page_tokens at most).
    void plan_device(const int32_t* d_lens, void* stream = nullptr, int max_tiles = 0, const int32_t* d_pages = nullptr,
                     int page_stride = 0);
    /// The attention for the last plan's lengths. With d_extra_out/d_extra_lse (a second normalized
    /// state per query head, [B, Hkv*g, d] and [B, Hkv*g] natural log, -inf = empty: wave's estimation
    /// zone) the two are merged by their LSEs, as decode_attention's extra does.
    void run(const float* d_q, const uint16_t* d_k, const uint16_t* d_v, float* d_out, float* d_lse,
             void* stream = nullptr, const float* d_extra_out = nullptr, const float* d_extra_lse = nullptr);

  private:
    struct Impl;
    Impl* impl_;
};

// ---- cuDNN's fused attention (library/cudnn_decode.cpp: the backend PyTorch's SDPA picks on Hopper) ----

/// "" when this build and this machine run cuDNN's SDPA for head dim d and GQA group `group`; else why
/// not (a build without the cuDNN frontend headers, no loadable libcudnn.so.9 — RETRO_CUDNN_LIB names one
/// —, a shape cuDNN's fused attention does not take). Loads the library on the first call.
std::string cudnn_decode_unsupported(int d, int group);

/// Full attention per (batch item, KV head) by cuDNN's fused scaled-dot-product attention (the cuDNN
/// frontend's SDPA graph: one query token per sequence, the KV lengths as its padding mask, GQA by
/// heads), over the same KV layout as decode_attention read in place as [B, Hkv, capacity, d].
/// K, V: [B*Hkv, capacity, d] fp16; q: [B, Hkv*g, d] f32 (narrowed to fp16 for cuDNN, which takes one
/// dtype for Q, K and V); out: [B, Hkv*g, d] f32 (cuDNN's fp16 output widened); lse: [B, Hkv*g] f32
/// natural log (cuDNN's softmax stats) or null.
/// How CudnnDecode builds its graph. The defaults give the LSE and take ragged lengths; PyTorch's SDPA at
/// inference builds {stats = false, exact_len = the length}: no softmax stats, no mask, a graph per shape.
struct CudnnDecodeOptions {
    bool stats = true;  ///< the softmax stats as an output (run's d_lse); false: d_lse is left untouched
    int exact_len = 0;  ///< > 0: every sequence holds exactly this many tokens (<= capacity; no padding
                        ///< mask, run's d_lens unused); 0: d_lens as the padding mask
};

class CudnnDecode {
  public:
    /// Builds cuDNN's plan for the shape (heuristics, then the first engine that supports it; seconds,
    /// once). Throws ParamError naming the reason when cudnn_decode_unsupported(s.d, s.group) is not "",
    /// or when cuDNN refuses the graph.
    explicit CudnnDecode(const DecodeShape& s, const CudnnDecodeOptions& o = {});
    ~CudnnDecode();
    CudnnDecode(const CudnnDecode&) = delete;
    CudnnDecode& operator=(const CudnnDecode&) = delete;
    /// The attention of each batch item over its first d_lens[b] tokens (every KV head of an item the
    /// same length, as a serving engine's sequence; d_lens: [B] int32 in device memory, 1..capacity), or
    /// over exactly options.exact_len tokens when that is set (d_lens unused, may be null).
    void run(const float* d_q, const uint16_t* d_k, const uint16_t* d_v, const int32_t* d_lens, float* d_out,
             float* d_lse, void* stream = nullptr);

  private:
    struct Impl;
    Impl* impl_;
};

}  // namespace retro::cuda
