#pragma once
// GPU block cache of offloaded KV (RetroInfer §4.3 "wave buffer"; public code wave_buffer_cpu.cpp).
//
// The cache holds transfer *units* — a wave cluster (its member list, stored in fixed-size blocks of
// block_tokens tokens, only the last one partial) or a block of `token_block` consecutive positions
// for token-granular methods — and its capacity is counted in token *slots*: a cluster of s tokens
// occupies ceil(s / block_tokens) * block_tokens slots (whole blocks), a token unit token_block slots.
// The cluster mapping table is the map unit id -> entry (on GPU or not, slots, policy state).
//
// One step, as the public code's batch_access / batch_update:
//   1. lookup: every needed unit is a hit (served from the GPU cache) or a miss (copied from CPU
//      memory into the execution buffer), against the state *before* this step;
//   2. update (asynchronous in the real system, off the critical path): hits refresh their policy
//      state (in reverse rank order, as the public code), then misses are admitted in rank order until
//      the per-step admission cap is reached, evicting entries not needed this step. A unit admitted at
//      step t therefore serves hits from step t+1 on.
// Belady (offline optimum, an upper bound) needs each unit's next use: simulate_cache computes it from
// the whole request sequence; it evicts the entry used farthest in the future and bypasses a miss whose
// next use is later than every candidate victim's.
#include <cstdint>
#include <string>
#include <vector>

namespace retro {

enum class CachePolicy { lru, lfu, fifo, clock, belady };

CachePolicy parse_cache_policy(const std::string& s);  ///< lru|lfu|fifo|clock|belady (ParamError)
const char* cache_policy_name(CachePolicy p);

struct CacheParams {
    int64_t capacity_slots = 0;   ///< token slots on the GPU (0 = no cache: every needed unit misses)
    CachePolicy policy = CachePolicy::lru;
    int64_t admit_cap_slots = 0;  ///< slots admitted per step at most (0 = no cap beyond capacity)
};

/// A unit needed this step. `tokens` cross PCIe on a miss; `slots` is its cache footprint.
struct UnitRequest {
    int64_t id = 0;
    int32_t tokens = 0;
    int32_t slots = 0;
};

/// Outcome of one step. Conservation: hit_slots + miss_slots = needed slots, likewise units, tokens.
struct StepTraffic {
    int64_t hit_units = 0, miss_units = 0;
    int64_t hit_slots = 0, miss_slots = 0;
    int64_t hit_tokens = 0, miss_tokens = 0;
    int64_t admitted_slots = 0, evicted_slots = 0;
    double hit_ratio() const {  ///< hit slots / needed slots (1 when nothing was needed)
        const int64_t n = hit_slots + miss_slots;
        return n == 0 ? 1.0 : (double)hit_slots / (double)n;
    }
};

/// Tokens per block: block_bytes of keys / (head_dim * elem_bytes), at least 1 (2 KB, d 128, fp16: 8).
int cache_block_tokens(int block_bytes, int head_dim, double elem_bytes);
/// Capacity in token slots of a cache of `cache_bytes` (when > 0) or `fraction` x prompt_len tokens of
/// KV (2 * head_dim * elem_bytes bytes each), rounded down to whole blocks.
int64_t cache_capacity_slots(double fraction, double cache_bytes, int prompt_len, int head_dim, double elem_bytes,
                             int block_tokens);
/// Slots a unit of `tokens` occupies: whole blocks, ceil(tokens / block_tokens) * block_tokens.
inline int32_t unit_slots(int32_t tokens, int block_tokens) {
    return (tokens + block_tokens - 1) / block_tokens * block_tokens;
}

/// The transfer units of a token-granular method's fetch list (Selection::fetch_tokens, its order): units of
/// `token_block` consecutive positions, in the order of their first requested token, each once, slots =
/// token_block; `tokens` what a miss moves: the unit's requested tokens (needed_only: PQCache's SyncFetchKV)
/// or the whole unit's visible positions (min(token_block, n - first position), at least 1). out is
/// replaced. Shared by the system model (HeadSystem) and the GPU's block cache (kernels/run/pq_offload).
void token_unit_requests(const std::vector<int32_t>& fetch_tokens, int token_block, bool needed_only, int n,
                         std::vector<UnitRequest>& out);

/// An online cache (every policy but Belady; Belady needs `next_use`).
class BlockCache {
  public:
    explicit BlockCache(CacheParams p);
    /// One step over `req` (rank order, unique ids). next_use[i] = the next step at which req[i] is
    /// needed again (INT64_MAX for never): required for Belady, ignored otherwise.
    StepTraffic step(const std::vector<UnitRequest>& req, const std::vector<int64_t>* next_use = nullptr);
    int64_t used_slots() const { return used_; }
    size_t size() const;  ///< entries resident
    bool contains(int64_t id) const;
    ~BlockCache();
    BlockCache(BlockCache&&) noexcept;
    BlockCache& operator=(BlockCache&&) noexcept;

  private:
    struct Impl;
    Impl* impl_;
    CacheParams p_;
    int64_t used_ = 0;
};

/// Replays a whole request sequence (steps[t] = units needed at step t, rank order, unique ids) and
/// returns the traffic of every step. Works for every policy; computes next uses for Belady.
std::vector<StepTraffic> simulate_cache(const std::vector<std::vector<UnitRequest>>& steps,
                                        const CacheParams& p);

}  // namespace retro
