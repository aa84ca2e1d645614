// The writer glue: a generated layer as the HeadSlice a reader would return, the trace's root attributes,
// and synthesize(), which streams a whole trace a KV head at a time through TraceWriter.
#include "core/error.hpp"
#include "core/interrupted.hpp"
#include "trace/synth.hpp"
#include "trace/synth_stages.hpp"
#include "trace/writer.hpp"

namespace retro {

HeadSlice synth_head_slice(const SynthParams& p, const SynthLayer& L, int kv_head) {
    HeadSlice s = synth_detail::head_slice_shape(p, L.layer, kv_head);
    const size_t kv = (size_t)s.n_tokens() * s.head_dim, qs = (size_t)s.num_steps * s.head_dim,
                 ps = (size_t)s.num_prefill * s.head_dim;
    const auto rows = [](const std::vector<float>& x, size_t begin, size_t count) {
        return std::vector<float>(x.begin() + (ptrdiff_t)begin, x.begin() + (ptrdiff_t)(begin + count));
    };
    s.keys = rows(L.keys, kv_head * kv, kv);
    s.values = rows(L.values, kv_head * kv, kv);
    s.queries = rows(L.queries, s.first_q_head * qs, s.group * qs);
    s.prefill_queries = rows(L.prefill_queries, s.first_q_head * ps, s.group * ps);
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
        const SynthLayerHeads layer(p, l);
        w.begin_layer(l, p.prefill_queries, p.prompt_len - p.prefill_queries);
        for (int g = 0; g < p.num_kv_heads; ++g) {
            if (stop && stop())  // the writer's destructor removes the temp file
                throw Interrupted("generation of " + path + " stopped at layer " + std::to_string(l) + " of " +
                                  std::to_string(p.num_layers) + " (KV head " + std::to_string(g) + " of " +
                                  std::to_string(p.num_kv_heads) + "); nothing was written");
            // One KV head's arrays at a time: a layer of a 1M-token Llama-3 trace would be 8 GiB.
            const HeadSlice s = layer.head(g);
            w.write_kv_head(l, g, s.keys, s.values, s.queries, s.prefill_queries);
        }
    }
    w.finish();
}

}  // namespace retro
