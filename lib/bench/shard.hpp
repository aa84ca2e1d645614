#pragma once
// Deterministic sharding of a sweep (docs/cluster.md): `retro-bench run CONFIG --shard I/N` runs only
// the units of shard I. A unit is one (run, trace, layer, KV head) - the runner's part file - or, on the
// "cuda" backend, one (run, trace, layer), since the device runs every KV head of a layer together.
// Every shard computes the same assignment from the config and the traces' shapes alone (no
// coordination, no shared state), balanced by an estimated cost: tokens x method weight.
#include <cstdint>
#include <string>
#include <vector>

#include "bench/config.hpp"

namespace retro {

struct PreparedTrace;

/// Shard `index` of `count` (0 <= index < count). count == 0: not sharded (every unit).
struct ShardSpec {
    int index = 0;
    int count = 0;
    bool active() const { return count > 0; }
    std::string str() const { return std::to_string(index) + "/" + std::to_string(count); }
};

/// Parses "I/N" (0-based I < N). Throws ConfigError naming the text and the expected form.
ShardSpec parse_shard(const std::string& text);

/// One unit of work and the part files it writes.
struct ShardUnit {
    size_t trace = 0;  ///< index into the prepared traces
    size_t run = 0;    ///< index into cfg.runs
    int layer = 0;
    int kv_head = -1;    ///< -1: every selected KV head of the layer (backend "cuda")
    uint64_t cost = 0;   ///< estimated cost: tokens x method weight (arbitrary units)
};

/// Relative cost per token of a method, including the exact-attention reference it is evaluated
/// against (calibrated on the quickstart sweep, docs/cluster.md; unknown methods get the largest).
uint64_t method_cost_weight(const std::string& method);

/// Every unit of the sweep in canonical order (trace, layer, KV head, run) with its estimated cost.
/// `whole_layers`: one unit per (run, trace, layer) (the "cuda" backend).
std::vector<ShardUnit> sweep_units(const RunConfig& cfg, const std::vector<PreparedTrace>& traces,
                                   bool whole_layers);

/// The shard (0..count-1) of every unit, by greedy longest-processing-time: units sorted by cost,
/// largest first (ties: canonical order), each to the least loaded shard (ties: lowest index).
/// `group[i]` names the head a unit belongs to: when there are at least 4 heads per shard, whole heads
/// are assigned (their units share one exact-attention pass in the runner; splitting them would repeat
/// it in every shard), otherwise single units. Same input, same output, on every machine.
std::vector<int> assign_shards(const std::vector<uint64_t>& cost, const std::vector<size_t>& group, int count);

/// The shard of every unit of `units` (assign_shards over their heads).
std::vector<int> assign_shards(const std::vector<ShardUnit>& units, int count);

/// Estimated cost per shard for `count` shards: [count].
std::vector<uint64_t> shard_loads(const std::vector<ShardUnit>& units, int count);

}  // namespace retro
