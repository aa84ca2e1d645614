#pragma once
// Merging a sharded sweep (docs/cluster.md). Each `retro-bench run CONFIG --shard I/N` writes its part
// files into the shared results directory and records its sessions in shards/shard-I-of-N.json (host,
// revision, config hash and source, times, status). `retro-bench merge DIR` - or the shard that finds
// every unit present when it finishes - checks that every unit of the sweep has a part file made by
// one revision from one config, then writes runs/, runs.jsonl, per_head.csv and manifest.json with the
// same code as a one-machine run (lib/bench/assemble).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/shard.hpp"

namespace retro {

/// <dir>/shards/shard-<I>-of-<N>.json
std::string shard_session_path(const std::string& dir, const ShardSpec& s);

struct MergeOutcome {
    std::string dir;
    std::vector<nlohmann::json> records;  ///< the run records, in config order
    size_t units = 0;                      ///< units checked (every one present)
    int shard_files = 0;                   ///< shard session files merged
};

/// Merges the sharded results directory `dir`. Throws Error (before writing anything) naming: the
/// units whose part file is absent (with the shard that owns each), or the two revisions / config
/// hashes found among the part files and shard sessions, or a directory without shard sessions.
MergeOutcome merge_results(const std::string& dir);

}  // namespace retro
