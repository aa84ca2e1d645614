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

HeadSlice head_slice_shape(const SynthParams& p, int layer, int kv_head) {
    if (kv_head < 0 || kv_head >= p.num_kv_heads)
        throw ParamError("synthetic trace: kv_head " + std::to_string(kv_head) + " is out of range 0 .. " +
                         std::to_string(p.num_kv_heads - 1));
    HeadSlice s;
    s.layer = layer;
    s.kv_head = kv_head;
    s.head_dim = p.head_dim;
    s.prompt_len = p.prompt_len;
    s.num_steps = p.decode_steps;
    s.group = p.num_q_heads / p.num_kv_heads;
    s.first_q_head = kv_head * s.group;
    s.num_prefill = p.prefill_queries;
    s.prefill_first_position = p.prompt_len - p.prefill_queries;
    return s;
}

}  // namespace synth_detail

SynthLayerHeads::SynthLayerHeads(const SynthParams& p, int layer) : p_(p) {
    p_.validate();
    if (layer < 0 || layer >= p_.num_layers)
        throw ParamError("synthetic trace: layer " + std::to_string(layer) + " is out of range 0 .. " +
                         std::to_string(p_.num_layers - 1));
    c_ = std::make_unique<synth_detail::LayerContext>(p_, layer);
}

SynthLayerHeads::~SynthLayerHeads() = default;

HeadSlice SynthLayerHeads::head(int g, std::vector<SynthHeadInfo>* infos) const {
    using namespace synth_detail;
    const LayerContext& c = *c_;
    HeadSlice s = head_slice_shape(p_, c.layer, g);
    const int d = c.d, n = c.n;
    s.keys.assign((size_t)n * d, 0.0f);
    s.values.assign((size_t)n * d, 0.0f);
    s.queries.assign((size_t)c.grp * c.steps * d, 0.0f);
    s.prefill_queries.assign((size_t)c.grp * c.npf * d, 0.0f);

    // Keys and values first: the queries are calibrated on them.
    const KvConst kv = kv_constants(c, g);
    synth_kv_head(c, kv, g, s.keys.data(), s.values.data());

    // The group's shared processes, then each query head on the keys.
    const GroupQueries gq = group_queries(c, g);
    std::vector<SynthHeadInfo> heads((size_t)c.grp);
    for (int j = 0; j < c.grp; ++j) heads[(size_t)j] = draw_head(p_, c.layer, s.first_q_head + j);
#pragma omp parallel for schedule(dynamic, 1)
    for (int j = 0; j < c.grp; ++j)
        synth_query_head(c, kv, gq, s.first_q_head + j, s.keys.data(), heads[(size_t)j],
                         s.queries.data() + (size_t)j * c.steps * d, s.prefill_queries.data() + (size_t)j * c.npf * d);
    if (infos) *infos = std::move(heads);
    return s;
}

SynthLayer synthesize_layer(const SynthParams& p, int layer) {
    const SynthLayerHeads gen(p, layer);
    const size_t n = (size_t)p.n_tokens(), d = (size_t)p.head_dim, grp = (size_t)(p.num_q_heads / p.num_kv_heads);
    SynthLayer L;
    L.layer = layer;
    L.keys.resize((size_t)p.num_kv_heads * n * d);
    L.values.resize(L.keys.size());
    L.queries.resize((size_t)p.num_q_heads * p.decode_steps * d);
    L.prefill_queries.resize((size_t)p.num_q_heads * p.prefill_queries * d);
    L.heads.reserve((size_t)p.num_q_heads);
    for (int g = 0; g < p.num_kv_heads; ++g) {
        std::vector<SynthHeadInfo> infos;
        const HeadSlice s = gen.head(g, &infos);
        std::copy(s.keys.begin(), s.keys.end(), L.keys.begin() + (ptrdiff_t)(g * n * d));
        std::copy(s.values.begin(), s.values.end(), L.values.begin() + (ptrdiff_t)(g * n * d));
        // a group's query heads are consecutive rows of the layer's [num_q_heads, ...] arrays
        std::copy(s.queries.begin(), s.queries.end(), L.queries.begin() + (ptrdiff_t)(g * grp * p.decode_steps * d));
        std::copy(s.prefill_queries.begin(), s.prefill_queries.end(),
                  L.prefill_queries.begin() + (ptrdiff_t)(g * grp * p.prefill_queries * d));
        L.heads.insert(L.heads.end(), infos.begin(), infos.end());
    }
    return L;
}

}  // namespace retro
