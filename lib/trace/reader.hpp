#pragma once
// HDF5 reader of trace format v1. Opening validates the root attributes and every layer group's
// dataset shapes and dtypes (cheap: metadata only); values are checked for NaN/Inf as each head is read.
#include <memory>
#include <string>

#include "trace/trace.hpp"

namespace retro {

struct ReadOptions {
    bool prefill_queries = true;  ///< also read prefill_queries when the trace has them
    bool check_finite = true;     ///< throw TraceError on NaN/Inf in the slice
    /// Read only the first `max_steps` decode steps (and their tokens); -1 = all.
    int max_steps = -1;
};

class TraceReader {
  public:
    /// Opens and validates `path`. Throws TraceError naming the file (missing, not HDF5, truncated),
    /// the attribute or dataset, and what was expected.
    explicit TraceReader(const std::string& path);
    ~TraceReader();
    TraceReader(const TraceReader&) = delete;
    TraceReader& operator=(const TraceReader&) = delete;

    const TraceInfo& info() const { return info_; }
    bool has_layer(int layer) const;

    /// Reads one layer x KV head: keys/values [n_tokens, d], the group's queries [group, steps, d],
    /// prefill queries [group, n_prefill, d]; converted to float32. Reads only that head's hyperslab.
    HeadSlice read_head(int layer, int kv_head, const ReadOptions& opt = {}) const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    TraceInfo info_;
};

}  // namespace retro
