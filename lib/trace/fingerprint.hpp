#pragma once
// A cheap content fingerprint of a trace file, so that results computed from one trace are never mixed
// with results from another file at the same path (--resume onto a replaced or regenerated trace;
// docs/results.md, "Trace fingerprints").
//
// It hashes (FNV-1a 64) the file size, the layer list and, per layer and dataset (keys, values, queries,
// prefill_queries), the dataset's shape, its stored size (which follows the content for compressed
// datasets) and the raw stored bits of two sampled blocks of rows (8 rows of one head each, at
// positions that vary with the layer). The cost does not grow with the trace: about 8 small reads per
// layer, each touching one chunk. It detects any other file (another seed, model, prompt or recipe);
// an edit of a few values outside the sampled rows of an uncompressed file goes unnoticed.
#include <string>

#include "trace/trace.hpp"

namespace retro {

/// "v1-<bytes>-<16 hex>" for the trace at `path` whose metadata `info` was read by TraceReader (which
/// validated the layout). Throws TraceError naming the file and dataset when it cannot be read.
std::string trace_fingerprint(const std::string& path, const TraceInfo& info);

}  // namespace retro
