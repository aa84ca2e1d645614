#pragma once
// PQCache with its KV offloaded (the pq layer run with job.kv_on_gpu false; docs/methods/pq.md "On the GPU"):
// every (replica, KV head)'s K and V in pinned host memory; the static tokens' rows (sink, and every token
// from the prompt's first window on) in device memory; per (replica, KV head) a GPU block cache (PQCache
// §3.4) of units of job.unit_tokens consecutive positions (its 128-token blocks) held in pool blocks of
// job.block_tokens rows, whose hits, misses, admissions and evictions the system model's BlockCache decides
// (GpuCacheMap: the same policy code the model replays) and whose table lives on the GPU. A step's chosen
// rows are gathered into execution buffers on the device (pq_gather_rows: static rows, pool hits, misses
// zero-copy from the pinned store); after its attention the lists are read back (collect) and each cache's
// update is applied (apply: admitted units copied whole from the pinned store into their pool blocks, the
// table's entries set and cleared), on the same stream, right away or at the next step while the GPU selects
// (job.async_update): either way before the next step's gather.
#include <cstdint>
#include <vector>

#include "cuda_api.hpp"
#include "run/cache_update.hpp"
#include "run/gpu_cache_map.hpp"
#include "run/layer_common.hpp"

namespace retro::gpu_run {

class PqOffload {
  public:
    /// The stores for the job's heads (kv: upload_layer_kv's pinned KV, [B*H, kv_rows, d]), `lists` lists
    /// (per per sequence) of `width` rows each, the static store holding [0, sink_end) and [static_from,
    /// kv_rows). Throws GpuMemoryError when the device buffers do not fit.
    PqOffload(const GpuLayerJob& job, const LayerShape& s, const LayerKv& kv, int kv_rows, int sink_end,
              int static_from, int per, int width);

    /// Device bytes the offloaded run needs beyond the selection's (static store, pool, table, execution
    /// buffers), for require_device_memory before anything is allocated.
    static size_t device_bytes(const GpuLayerJob& job, const LayerShape& s, int kv_rows, int sink_end,
                               int static_from, int lists, int width);

    /// Queues the gather of every list's rows (d_table, d_lens: pq_select's [lists, width], [lists]) into
    /// the execution buffers at n visible tokens with coded tokens [sink_end, coded_end).
    void gather(const int32_t* d_table, const int32_t* d_lens, int coded_end, void* stream);
    const uint16_t* xk() const { return xk_.get(); }  ///< [lists, width, d] fp16
    const uint16_t* xv() const { return xv_.get(); }

    /// What a step's lists found: per (replica, KV head) the tokens the gather read from host memory (each
    /// list's retrieved tokens whose unit was not resident: with one list per pair the BlockCache's miss
    /// tokens; per_head lists each read their own), the lists' bytes read back, the host's time.
    struct Update {
        std::vector<int64_t> miss_tokens;  ///< [B*H]
        double d2h_bytes = 0;
        double host_us = 0;
    };
    /// After the step's attention, with a cache: every list's entries read back (d_table, pq_select's: the
    /// `fixed` static entries then the k retrieved ones; synchronizes the stream once) and each (replica, KV
    /// head)'s requested units made (its lists' retrieved tokens, rank by rank over its lists, each once: the
    /// CPU method's fetch order; needed tokens per unit), pending for apply(). Without a cache nothing is
    /// read back: every retrieved token was read from host memory.
    Update collect(const int32_t* d_table, int fixed, int k, int n, cuda::Stream& stream);

    /// The pending requests through each cache's policy step, the admitted units' rows copied whole from the
    /// pinned store into their pool blocks and the table's entries set and cleared, before any later work on
    /// `stream` (the gather): queued on it after collect() (the update after the attention), or at the next
    /// step while the GPU selects (job.async_update) on a stream of their own that `stream` then waits for
    /// (CacheUpdateQueue: the copies overlap the select). Nothing pending (no cache, or applied): nothing done.
    struct Applied {
        double fill_bytes = 0;  ///< the admitted units' K and V copied over PCIe
        double host_us = 0;
    };
    Applied apply(cuda::Stream& stream);
    bool pending() const { return pending_; }

    int64_t pool_rows() const { return C_; }

  private:
    const GpuLayerJob& job_;
    LayerShape s_;
    int kv_rows_, per_, width_, lists_;
    cuda::PinnedBuffer<int32_t> h_table_;  ///< every list's entries, read back for the update
    cuda::PinnedBuffer<cuda::CopySegment> h_adm_;
    cuda::DeviceBuffer<cuda::CopySegment> d_adm_;
    cuda::PinnedBuffer<int64_t> h_at_;
    cuda::PinnedBuffer<int32_t> h_val_;
    cuda::DeviceBuffer<int64_t> d_at_;
    cuda::DeviceBuffer<int32_t> d_val_;
    CacheUpdateQueue updates_;
    cuda::DeviceBuffer<uint16_t> static_k_, static_v_, pool_k_, pool_v_, xk_, xv_;
    cuda::DeviceBuffer<int32_t> blocks_;  ///< [B*H, units * unit_blocks] the cache's table
    cuda::PqRowSources src_;
    int64_t C_ = 0;       ///< pool rows per (replica, KV head)
    int block_rows_ = 1;  ///< rows per pool block (block_tokens, or the unit's when it is not whole blocks)
    std::vector<GpuCacheMap> caches_;
    std::vector<std::vector<UnitRequest>> pending_reqs_;  ///< [B*H] the collected step's requests
    bool pending_ = false;
    std::vector<int32_t> fetch_;
    std::vector<std::vector<int32_t>> found_;
};

}  // namespace retro::gpu_run
