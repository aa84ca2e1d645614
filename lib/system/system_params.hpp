#pragma once
// The "system" section of a run config (docs/system-model.md): GPU block cache and cost-model settings.
// It is a system-side setting, not a method parameter; list values are sweep axes (lib/bench/config).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "system/block_cache.hpp"

namespace retro {

struct SystemParams {
    double cache = 0.05;        ///< GPU cache per KV head, fraction of its prompt KV, in [0, 1]
    double cache_bytes = 0;     ///< absolute GPU cache bytes per KV head (> 0 overrides `cache`)
    std::string policy = "lru";  ///< lru | lfu | fifo | clock | belady
    int block_bytes = 2048;     ///< KV block size (one of K or V): block_tokens = block_bytes / (d * elem)
    int token_block = 1;        ///< tokens per transfer unit for token-granular methods (PQCache: 128)
    int admit_cap = 0;          ///< blocks admitted per step per KV head at most; 0 = capacity only
    double lookup_ns = 50;      ///< CPU time of one mapping-table lookup per unit (calibrate)
    /// What a missed token unit moves on the critical path: "unit" (the whole unit: wave's clusters,
    /// Quest's pages) or "needed" (only the unit's requested tokens, PQCache's SyncFetchKV; the cache
    /// then fills the whole block asynchronously, bytes not counted in h2d_bytes). Token units only.
    std::string miss_moves = "unit";

    /// Strict parse of one (scalar) point; unknown keys and bad values are ConfigErrors naming `where`.
    static SystemParams from_json(const nlohmann::json& j, const std::string& where);
    nlohmann::json to_json() const;
    CachePolicy cache_policy() const { return parse_cache_policy(policy); }
};

/// `system.throughput`: the decode-throughput table added to every run record.
struct ThroughputParams {
    std::string model = "llama3-8b";  ///< a model shape (system/cost_model.hpp)
    std::vector<int> batch = {1, 2, 4, 8, 16, 32, 64, 128};
    std::vector<int> contexts;        ///< context lengths; empty = the trace's visible tokens
    static ThroughputParams from_json(const nlohmann::json& j, const std::string& where);
    nlohmann::json to_json() const;
};

/// The keys of "system" that are sweep axes (everything but "throughput").
const std::vector<std::string>& system_axis_keys();

}  // namespace retro
