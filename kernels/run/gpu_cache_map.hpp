#pragma once
// The GPU block cache of one (sequence, KV head) on the measured wave path (docs/cuda.md). Which
// clusters hit, miss, are admitted or evicted is decided by the system model's BlockCache (the same
// policy code the model replays, so measured and modeled traffic agree); this class places the resident
// clusters in fixed blocks of a device pool (block b = pool rows [b*bt, (b+1)*bt)) and keeps that
// placement in step with the BlockCache.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "system/block_cache.hpp"

namespace retro::gpu_run {

class GpuCacheMap {
  public:
    /// p.capacity_slots is a multiple of block_tokens (cache_capacity_slots); 0 = no cache.
    GpuCacheMap(const CacheParams& p, int block_tokens);

    /// Pool blocks of a resident cluster (its tokens in order, the last block partial), or nullptr.
    const std::vector<int32_t>* find(int64_t id) const;

    /// One step over `req` (rank order): the BlockCache's lookup and update; then the placement follows
    /// it: evicted clusters free their blocks, admitted ones get blocks. `admitted` receives the ids
    /// placed this step (their data is copied from the execution buffer by the caller); `evicted`, when
    /// given, the ids that left (the device table's entries to clear). Throws Error when the placement and
    /// the BlockCache disagree (a bug).
    StepTraffic step(const std::vector<UnitRequest>& req, std::vector<int64_t>& admitted,
                     std::vector<int64_t>* evicted = nullptr);

    /// Every resident cluster with its pool blocks (the device table's full upload after an index update).
    const std::unordered_map<int64_t, std::vector<int32_t>>& resident() const { return where_; }

    int block_tokens() const { return bt_; }
    int64_t blocks() const { return blocks_; }

  private:
    BlockCache cache_;
    int bt_;
    int64_t blocks_;
    std::vector<int32_t> free_;  ///< free block indices (a stack: lowest first at the start)
    std::unordered_map<int64_t, std::vector<int32_t>> where_;
};

}  // namespace retro::gpu_run
