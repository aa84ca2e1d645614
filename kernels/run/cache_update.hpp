#pragma once
// The GPU block cache's update queued on the device, as wave's and pq's offloaded runs apply it
// (kernels/run/wave_layer.cpp, pq_offload.cpp): the admitted rows' copies first, then the table's entries
// that point at them — in this order on one stream, so that the table never names rows not there yet.
// With the asynchronous update (GpuLayerJob::async_update: RetroInfer's and PQCache's) the two go on a
// stream of their own, so the copies over PCIe overlap the GPU's select on the method's stream, and the
// method's stream waits for them before anything queued on it later (the gather that reads the pool).
#include <cstddef>
#include <cstdint>

#include "cuda_api.hpp"

namespace retro::gpu_run {

/// The update's lists in pinned memory and their device copies: n_adm copy descriptors (h_adm, [n_adm]) and
/// n_at table entries (table[h_at[i]] = h_val[i], [n_at]); the callers own and size them.
struct CacheUpdateLists {
    cuda::PinnedBuffer<cuda::CopySegment>& h_adm;
    cuda::DeviceBuffer<cuda::CopySegment>& d_adm;
    cuda::PinnedBuffer<int64_t>& h_at;
    cuda::PinnedBuffer<int32_t>& h_val;
    cuda::DeviceBuffer<int64_t>& d_at;
    cuda::DeviceBuffer<int32_t>& d_val;
};

class CacheUpdateQueue {
  public:
    /// Queues the copies of the n_adm descriptors (rows of d fp16; `longest`: the most tokens of one) and
    /// then the n_at entries into `table` ([*] int32 device memory). On `main` when !side; else on this
    /// queue's own stream, after which `main` waits for them (queued work only: the host does not wait).
    /// The lists may be rewritten once `main` has passed this point (the callers synchronize it each step).
    void queue(const CacheUpdateLists& l, size_t n_adm, int64_t longest, size_t n_at, int d, int32_t* table,
               cuda::Stream& main, bool side);

  private:
    cuda::Stream side_;
    cuda::Event done_;
};

}  // namespace retro::gpu_run
