#pragma once
// Memory estimates of the trace stages for the checks before work (lib/core/memory.hpp, issue 16):
// reading one head, and generating a synthetic trace.
#include <string>

#include "core/memory.hpp"
#include "trace/synth.hpp"

namespace retro {

/// Bytes TraceReader::read_head holds at its peak for one head of `info` (float32 keys, values, queries
/// and prefill queries, plus the storage-dtype buffers they are decoded from), reading `steps` decode
/// steps (-1 = all) and the prefill queries when `prefill`. A double: header sizes up to 2^30 per axis
/// must not overflow the estimate that refuses them.
double head_slice_bytes(const TraceInfo& info, int steps = -1, bool prefill = true);

/// Peak bytes of synthesize(p, out), which streams a KV head at a time: one head's float32 keys and
/// values [n_tokens, d], its group's queries [group, decode_steps, d] and prefill queries
/// [group, prefill_queries, d], the writer's 16-bit copies of them (float16/bfloat16 traces), the RoPE
/// table [n_tokens, d] and the per-token text arrays.
MemoryEstimate estimate_synth_memory(const SynthParams& p, const std::string& out);

}  // namespace retro
