#include "trace/memory_estimates.hpp"

#include <algorithm>

namespace retro {

double head_slice_bytes(const TraceInfo& info, int steps, bool prefill) {
    const double s = steps < 0 ? info.num_decode_steps : std::min(steps, info.num_decode_steps);
    const double d = info.head_dim, g = info.group_size();
    const double elems =
        2.0 * (info.prompt_len + s) * d + g * s * d + (prefill ? g * info.num_prefill_queries * d : 0.0);
    // float32 arrays, plus the raw 16-bit buffers alive while they are decoded (float32 is read in place)
    return elems * (4.0 + (info.dtype == DType::f32 ? 0.0 : (double)dtype_bytes(info.dtype)));
}

MemoryEstimate estimate_synth_memory(const SynthParams& p, const std::string& out) {
    // synthesize() streams a KV head at a time (SynthLayerHeads): one head's keys and values, its GQA
    // group's queries and prefill queries, float32 + the writer's encoded copies.
    const double n = (double)p.prompt_len + p.decode_steps, d = p.head_dim;
    const double grp = p.num_kv_heads > 0 ? (double)p.num_q_heads / p.num_kv_heads : p.num_q_heads;
    const double head_elems = 2.0 * n * d + grp * p.decode_steps * d + grp * p.prefill_queries * d;
    const DType dt = parse_dtype(p.dtype);
    const double writer = dt == DType::f32 ? 0.0 : (double)dtype_bytes(dt);  // TraceWriter's encoded copies
    // the layer's shared tables: RoPE cos/sin [n, d/2] each and the per-token topic, word and needle arrays
    const double tables = n * d * 4.0 + n * 3 * 4.0;
    MemoryEstimate e;
    e.bytes = head_elems * (4.0 + writer) + tables;
    e.what = "synthesizing " + out + " (" + std::to_string((long long)n) + " tokens x head_dim " +
             std::to_string(p.head_dim) + ", one KV head at a time)";
    e.advice = "use a shorter prompt (prompt_len) or fewer decode steps";
    return e;
}

}  // namespace retro
