// The writer glue: a generated layer as the HeadSlice a reader would return, the trace's root attributes,
// and synthesize(), which writes a whole trace layer by layer through TraceWriter.
#include "core/error.hpp"
#include "core/interrupted.hpp"
#include "trace/synth.hpp"
#include "trace/writer.hpp"

namespace retro {

HeadSlice synth_head_slice(const SynthParams& p, const SynthLayer& L, int kv_head) {
    if (kv_head < 0 || kv_head >= p.num_kv_heads)
        throw ParamError("synth_head_slice: kv_head " + std::to_string(kv_head) + " is out of range 0 .. " +
                         std::to_string(p.num_kv_heads - 1));
    const int d = p.head_dim, n = p.n_tokens(), grp = p.num_q_heads / p.num_kv_heads;
    HeadSlice s;
    s.layer = L.layer;
    s.kv_head = kv_head;
    s.head_dim = d;
    s.prompt_len = p.prompt_len;
    s.num_steps = p.decode_steps;
    s.group = grp;
    s.first_q_head = kv_head * grp;
    const size_t kv = (size_t)n * d;
    s.keys.assign(L.keys.begin() + (ptrdiff_t)(kv_head * kv), L.keys.begin() + (ptrdiff_t)((kv_head + 1) * kv));
    s.values.assign(L.values.begin() + (ptrdiff_t)(kv_head * kv),
                    L.values.begin() + (ptrdiff_t)((kv_head + 1) * kv));
    const size_t qs = (size_t)p.decode_steps * d;
    s.queries.assign(L.queries.begin() + (ptrdiff_t)(s.first_q_head * qs),
                     L.queries.begin() + (ptrdiff_t)((s.first_q_head + grp) * qs));
    s.num_prefill = p.prefill_queries;
    s.prefill_first_position = p.prompt_len - p.prefill_queries;
    const size_t ps = (size_t)p.prefill_queries * d;
    s.prefill_queries.assign(L.prefill_queries.begin() + (ptrdiff_t)(s.first_q_head * ps),
                             L.prefill_queries.begin() + (ptrdiff_t)((s.first_q_head + grp) * ps));
    return s;
}

TraceInfo synth_trace_info(const SynthParams& p) {
    TraceInfo info;
    info.version = 1;
    info.model = "synthetic-" + p.preset_name;
    info.num_layers = p.num_layers;
    info.num_q_heads = p.num_q_heads;
    info.num_kv_heads = p.num_kv_heads;
    info.head_dim = p.head_dim;
    info.prompt_len = p.prompt_len;
    info.num_decode_steps = p.decode_steps;
    info.rope_applied = true;
    info.rope_layout = "half_split";
    info.rope_theta = p.rope_theta;
    info.source = "synthetic:retro-synth v1 " + p.to_json().dump();
    info.dtype = parse_dtype(p.dtype);
    for (int l = 0; l < p.num_layers; ++l) info.layers.push_back(l);
    info.num_prefill_queries = p.prefill_queries;
    info.prefill_first_position = p.prompt_len - p.prefill_queries;
    return info;
}

void synthesize(const SynthParams& p, const std::string& path, const std::function<bool()>& stop) {
    p.validate();
    TraceInfo info = synth_trace_info(p);
    info.layers.clear();
    info.num_prefill_queries = 0;
    info.prefill_first_position = 0;
    TraceWriter w(path, info);
    for (int l = 0; l < p.num_layers; ++l) {
        if (stop && stop())  // the writer's destructor removes the temp file
            throw Interrupted("generation of " + path + " stopped at layer " + std::to_string(l) + " of " +
                              std::to_string(p.num_layers) + "; nothing was written");
        SynthLayer L = synthesize_layer(p, l);
        w.write_layer(l, L.keys, L.values, L.queries, L.prefill_queries, p.prefill_queries,
                      p.prompt_len - p.prefill_queries);
    }
    w.finish();
}

}  // namespace retro
