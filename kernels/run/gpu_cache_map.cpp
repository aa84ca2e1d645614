#include "run/gpu_cache_map.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace retro::gpu_run {

GpuCacheMap::GpuCacheMap(const CacheParams& p, int block_tokens)
    : cache_(p), bt_(block_tokens), blocks_(p.capacity_slots / block_tokens) {
    if (block_tokens < 1 || p.capacity_slots % block_tokens != 0)
        throw ParamError("cuda backend: cache capacity " + std::to_string(p.capacity_slots) +
                         " is not a whole number of " + std::to_string(block_tokens) + "-token blocks");
    if (p.policy == CachePolicy::belady)
        throw ParamError("cuda backend: the GPU block cache runs online; Belady's policy needs the future");
    for (int64_t b = blocks_; b-- > 0;) free_.push_back((int32_t)b);
}

const std::vector<int32_t>* GpuCacheMap::find(int64_t id) const {
    auto it = where_.find(id);
    return it == where_.end() ? nullptr : &it->second;
}

StepTraffic GpuCacheMap::step(const std::vector<UnitRequest>& req, std::vector<int64_t>& admitted,
                              std::vector<int64_t>* evicted) {
    admitted.clear();
    if (evicted) evicted->clear();
    const StepTraffic tr = cache_.step(req);
    for (auto it = where_.begin(); it != where_.end();) {  // evictions first: they make the room
        if (cache_.contains(it->first)) {
            ++it;
            continue;
        }
        free_.insert(free_.end(), it->second.begin(), it->second.end());
        if (evicted) evicted->push_back(it->first);
        it = where_.erase(it);
    }
    for (const UnitRequest& u : req) {
        if (where_.count(u.id) || !cache_.contains(u.id)) continue;
        const size_t nb = (size_t)(u.slots / bt_);
        if (free_.size() < nb) throw Error("cuda backend: GPU cache placement out of blocks (internal error)");
        std::vector<int32_t>& blocks = where_[u.id];
        blocks.assign(free_.end() - (long)nb, free_.end());
        std::reverse(blocks.begin(), blocks.end());
        free_.resize(free_.size() - nb);
        admitted.push_back(u.id);
    }
    if (where_.size() != cache_.size())
        throw Error("cuda backend: GPU cache placement holds " + std::to_string(where_.size()) +
                    " clusters, the block cache " + std::to_string(cache_.size()) + " (internal error)");
    return tr;
}

}  // namespace retro::gpu_run
