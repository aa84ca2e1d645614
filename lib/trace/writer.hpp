#pragma once
// HDF5 writer of trace format v1. Writes to "<path>.tmp-<host>-<pid>-<n>" and renames onto `path` in
// finish(), so a crash or exception never leaves a partial trace under the final name; a new writer of
// `path` removes the temp files of writers that were killed (core/temp_files.hpp).
#include <memory>
#include <string>
#include <vector>

#include "trace/trace.hpp"

namespace retro {

struct WriteOptions {
    int chunk_tokens = 4096;  ///< chunk shape [1, chunk_tokens, head_dim] (per-head reads)
    int gzip_level = 0;       ///< 0 = no compression; 1..9 = deflate
};

class TraceWriter {
  public:
    /// `info` gives the root attributes (path/layers/num_prefill_queries are filled in by the writer).
    /// Throws TraceError on inconsistent info (GQA counts that don't divide, non-positive sizes, ...).
    TraceWriter(const std::string& path, const TraceInfo& info, const WriteOptions& opt = {});
    ~TraceWriter();  ///< without finish(): removes the temporary file
    TraceWriter(const TraceWriter&) = delete;
    TraceWriter& operator=(const TraceWriter&) = delete;

    /// Writes /layers/<layer>/ from float32 arrays, converted to info.dtype:
    ///   keys, values: [num_kv_heads, n_tokens, head_dim]
    ///   queries:      [num_q_heads, num_decode_steps, head_dim]
    ///   prefill_queries: [num_q_heads, n_prefill, head_dim] or empty (then n_prefill must be 0)
    /// Every layer written must use the same n_prefill and prefill_first_position.
    void write_layer(int layer, const std::vector<float>& keys, const std::vector<float>& values,
                     const std::vector<float>& queries, const std::vector<float>& prefill_queries = {},
                     int n_prefill = 0, int prefill_first_position = 0);

    /// Streaming, a KV head at a time (what synthesize() does, so a layer never has to be in memory):
    /// begin_layer creates /layers/<layer>/ and its datasets (n_prefill and prefill_first_position as in
    /// write_layer); then write_kv_head once per KV head, in any order:
    ///   keys, values: [n_tokens, head_dim] of KV head `kv_head`
    ///   queries: [group, num_decode_steps, head_dim], prefill_queries: [group, n_prefill, head_dim] of its
    ///   GQA group's query heads (kv_head * group ...).
    /// The next begin_layer / write_layer / finish throws TraceError naming the KV heads a layer lacks.
    void begin_layer(int layer, int n_prefill = 0, int prefill_first_position = 0);
    void write_kv_head(int layer, int kv_head, const std::vector<float>& keys, const std::vector<float>& values,
                       const std::vector<float>& queries, const std::vector<float>& prefill_queries = {});

    /// Flushes, closes and atomically renames the file into place. Requires at least one layer, each
    /// with every KV head written.
    void finish();

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace retro
