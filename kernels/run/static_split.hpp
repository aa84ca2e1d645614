#pragma once
// The split of a step between the GPU and the host's cores that MagicPIG and the CPU-index methods share
// (magicpig_layer.cpp, host_index_layer.cpp): the static pattern's KV (the first `ib` tokens and every
// token from `ie` on: sink, local window, decode tokens) in device memory and attended there; the other
// tokens' attention on the host; the two partial results merged by their log-sum-exp. Calls only
// cuda_api.hpp.
#include <cstdint>
#include <memory>
#include <vector>

#include "attention/attention.hpp"
#include "run/layer_common.hpp"

namespace retro::gpu_run {

/// The static tokens of every (replica, KV head) as fp16 rows [B*H, rows, d] in device memory: row r < ib is
/// token r, row r >= ib token ie + (r - ib); rows = ib + (s.tokens - ie) (the decode tokens included).
struct StaticKv {
    int ib = 0, ie = 0, rows = 0;
    cuda::DeviceBuffer<uint16_t> k, v;
    /// Bytes of StaticKv for a job before it is made (the callers' memory checks).
    static size_t bytes_for(const LayerShape& s, int ib, int ie) {
        return 2 * (size_t)s.bh() * (size_t)(ib + (s.tokens - ie)) * s.d * sizeof(uint16_t);
    }
};
StaticKv upload_static_kv(const GpuLayerJob& job, const LayerShape& s, int ib, int ie);

/// The static rows' attention of a step: each (replica, KV head)'s list of static rows (d_table [B*H, stride]
/// int32, rows of the StaticKv pool; d_lens [B*H]) by FlashInfer's decode reading them in place as one-token
/// pages where it takes the shape (library_takes: as full attention's baseline and the other methods), else by
/// decode_attention_pages with page 1. ds: the shape (capacity = stride).
class StaticAttention {
  public:
    StaticAttention(const GpuLayerJob& job, const cuda::DecodeShape& ds);
    /// Before the first step's timing: the library's buffers sized by a first plan over lists of `len` rows
    /// (nothing when len is 0).
    void prepare(const int32_t* d_table, const int32_t* d_lens, int len, cuda::Stream& stream);
    /// out [B, H*g, d], lse [B, H*g] of q [B, H*g, d] over the listed rows (every list `len` long; an empty list,
    /// a static pattern of no token, goes to the own kernel: lse -inf), on `stream`.
    void run(const float* q, const StaticKv& kv, const int32_t* d_table, const int32_t* d_lens, int len, float* out,
             float* lse, void* stream);

  private:
    cuda::DecodeShape ds_;
    std::unique_ptr<cuda::LibraryDecode> lib_;
    cuda::DeviceBuffer<float> work_;
};

/// out/lse <- the LSE merge of the GPU's partial (out_g [d] normalized, lse_g) and the host's p (may be
/// empty: the GPU's alone).
void merge_partials(const float* out_g, float lse_g, const PartialAttention& p, int d, float* out, float* lse);

/// The layer's outputs out [B*Hq, d] and lse [B*Hq]: each (replica, query head)'s GPU partial (o's host copies,
/// read back) merged with the host's parts[b * Hq + h * g + j] (the outputs' order).
void merge_layer_partials(const LayerOutputs& o, const std::vector<PartialAttention>& parts, int d, float* out,
                          float* lse);

}  // namespace retro::gpu_run
