// synthesize_layer(): one layer of a synthetic trace as a short sequence of named stages
// (synth_stages.hpp lists them and their files). Writing a whole trace is in synth_write.cpp.
#include "trace/synth.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "trace/synth_stages.hpp"

namespace retro {

namespace synth_detail {

LayerContext::LayerContext(const SynthParams& p_, int layer_)
    : p(p_),
      layer(layer_),
      d(p_.head_dim),
      n(p_.n_tokens()),
      H(p_.num_q_heads),
      G(p_.num_kv_heads),
      grp(p_.num_q_heads / p_.num_kv_heads),
      npf(p_.prefill_queries),
      steps(p_.decode_steps),
      q0(p_.prompt_len - p_.prefill_queries),
      nq(p_.prefill_queries + p_.decode_steps),
      B(make_bands(p_)),
      P(B.P),
      sd(2 * B.s_pairs()),
      rope(B, n),
      text(synth_text(p_)),
      needle_at((size_t)n, -1),
      T(text.num_topics),
      NN((int)text.needles.size()),
      inv_sqrt_d(1.0f / std::sqrt((float)d)),
      A_sink(std::sqrt((double)d)),
      sink_by_mean(p_.sink_mode == "mean"),
      ts(std::sqrt(p_.topic_share)),
      ws(std::sqrt(p_.word_share)),
      es(std::sqrt(std::max(0.0, 1.0 - p_.topic_share - p_.word_share))) {
    for (size_t k = 0; k < text.needles.size(); ++k)
        for (int j = 0; j < p.needle_span; ++j) needle_at[(size_t)(text.needles[k] + j)] = (int)k;
}

}  // namespace synth_detail

SynthLayer synthesize_layer(const SynthParams& p, int layer) {
    using namespace synth_detail;
    p.validate();
    if (layer < 0 || layer >= p.num_layers)
        throw ParamError("synthesize_layer: layer " + std::to_string(layer) + " is out of range 0 .. " +
                         std::to_string(p.num_layers - 1));
    const LayerContext c(p, layer);
    const int d = c.d, n = c.n;

    SynthLayer L;
    L.layer = layer;
    L.keys.assign((size_t)c.G * n * d, 0.0f);
    L.values.assign((size_t)c.G * n * d, 0.0f);
    L.queries.assign((size_t)c.H * c.steps * d, 0.0f);
    L.prefill_queries.assign((size_t)c.H * c.npf * d, 0.0f);
    L.heads.resize((size_t)c.H);
    for (int h = 0; h < c.H; ++h) L.heads[(size_t)h] = draw_head(p, layer, h);

    // Keys and values of every KV head (they depend on nothing the queries draw).
    std::vector<KvConst> kc((size_t)c.G);
    for (int g = 0; g < c.G; ++g) kc[(size_t)g] = kv_constants(c, g);
    synth_keys_values(c, kc, L.keys.data(), L.values.data());

    // Queries: each GQA group's shared processes, then each query head on its KV head's keys.
    std::vector<GroupQueries> gq((size_t)c.G);
    for (int g = 0; g < c.G; ++g) gq[(size_t)g] = group_queries(c, g);
#pragma omp parallel for schedule(dynamic, 1)
    for (int h = 0; h < c.H; ++h) {
        const int g = h / c.grp;
        synth_query_head(c, kc[(size_t)g], gq[(size_t)g], h, L.keys.data() + (size_t)g * n * d,
                         L.heads[(size_t)h], L.queries.data(), L.prefill_queries.data());
    }
    return L;
}

}  // namespace retro
