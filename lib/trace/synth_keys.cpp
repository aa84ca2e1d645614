// Keys and values: each KV head's constant vectors, then every token's key and value as a sum of
// components (docs/synth.md, "Keys and values"), each stage below naming the statistic it is there for.
#include <cmath>

#include "trace/synth_random.hpp"
#include "trace/synth_stages.hpp"

namespace retro::synth_detail {

namespace {

// ---- per KV head constants -------------------------------------------------------------------------

/// The key mean mu_K [d] every key carries, key_mean per dim, key_mean_low_gain times larger in the low
/// band L. Reproduces the keys' large shared mean (`inspect` key mean / spread: RetroInfer and MagicPIG
/// center keys for it; real SmolLM2 0.84). Its carrier pairs (band C) get equal modulus key_mean sqrt 2
/// and random phase: they are the recency carrier the queries' lambda term aligns with (`local` mass),
/// and equal moduli keep the recency kernel's far-field ripple as small as the number of pairs allows.
std::vector<float> key_mean(const LayerContext& c, int g) {
    const SynthParams& p = c.p;
    const int P = c.P;
    std::vector<float> mu_k((size_t)c.d, 0.0f);
    Rng r(p.seed, kKeyMean, (uint64_t)c.layer, (uint64_t)g);
    fill_pairs(r, mu_k.data(), P, 0, P, p.key_mean);
    for (int j = c.B.l_begin; j < P; ++j) {
        mu_k[(size_t)j] *= (float)p.key_mean_low_gain;
        mu_k[(size_t)(j + P)] *= (float)p.key_mean_low_gain;
    }
    for (int j = c.B.c_begin; j < c.B.c_end; ++j) {
        const double a = mu_k[(size_t)j], bb = mu_k[(size_t)(j + P)];
        const double m = std::sqrt(a * a + bb * bb);
        const double target = p.key_mean * std::sqrt(2.0);
        if (m > 0) {
            mu_k[(size_t)j] = (float)(a * target / m);
            mu_k[(size_t)(j + P)] = (float)(bb * target / m);
        }
    }
    return mu_k;
}

/// The unit sink direction e_s [d] the queries' sink term points along. Reproduces the sink mass on the
/// first tokens (`sink`). sink_mode "offset": a random direction in Z (sink keys carry an extra offset
/// along it). "mean": away from the low-band key mean, as in the real SmolLM2 trace, where the sink is
/// the token that lacks the mean (docs/traces.md, "Key mean and sinks").
std::vector<float> sink_direction(const LayerContext& c, const std::vector<float>& mu_k, int g) {
    const int P = c.P;
    std::vector<float> e_s((size_t)c.d, 0.0f);
    if (c.sink_by_mean) {  // queries win the sinks by pointing away from the low-band key mean
        for (int j = c.B.l_begin; j < P; ++j) {
            e_s[(size_t)j] = -mu_k[(size_t)j];
            e_s[(size_t)(j + P)] = -mu_k[(size_t)(j + P)];
        }
    } else {  // a random direction in Z
        Rng r(c.p.seed, kSinkDir, (uint64_t)c.layer, (uint64_t)g);
        fill_pairs(r, e_s.data(), P, c.B.z_begin, P, 1.0);
    }
    double nrm = 0;
    for (float v : e_s) nrm += (double)v * v;
    nrm = std::sqrt(nrm);
    for (float& v : e_s) v = (float)(v / nrm);
    return e_s;
}

/// Topic keys (semantic pairs) and values [T, d], word keys [V, d], needle keys (needle pairs, std
/// kNeedleKeySd) and values [NN, d]: the shared directions that make keys cluster by topic and by word
/// and make needles stand out (see token_semantic and token_needle below).
void content_vectors(const LayerContext& c, int g, KvConst& kv) {
    const SynthParams& p = c.p;
    const int d = c.d, P = c.P;
    const uint64_t l = (uint64_t)c.layer, gg = (uint64_t)g;
    kv.topic_k.assign((size_t)c.T * d, 0.0f);
    kv.topic_v.assign((size_t)c.T * d, 0.0f);
    for (int t = 0; t < c.T; ++t) {
        Rng rk(p.seed, kTopicKey, l, gg, (uint64_t)t);
        fill_pairs(rk, kv.topic_k.data() + (size_t)t * d, P, c.B.s_begin, c.B.s_end, 1.0);
        Rng rv(p.seed, kTopicVal, l, gg, (uint64_t)t);
        for (int i = 0; i < d; ++i) kv.topic_v[(size_t)t * d + i] = (float)(p.value_topic * rv.normal());
    }
    kv.word_k.assign((size_t)p.vocab_size * d, 0.0f);
    for (int w = 0; w < p.vocab_size; ++w) {
        Rng rk(p.seed, kWordKey, l, gg, (uint64_t)w);
        fill_pairs(rk, kv.word_k.data() + (size_t)w * d, P, c.B.s_begin, c.B.s_end, 1.0);
    }
    kv.needle_k.assign((size_t)c.NN * d, 0.0f);
    kv.needle_v.assign((size_t)c.NN * d, 0.0f);
    for (int k = 0; k < c.NN; ++k) {
        Rng rk(p.seed, kNeedleKey, l, gg, (uint64_t)k);
        fill_pairs(rk, kv.needle_k.data() + (size_t)k * d, P, c.B.n_begin, c.B.s_end, kNeedleKeySd);
        Rng rv(p.seed, kNeedleVal, l, gg, (uint64_t)k);
        for (int i = 0; i < d; ++i) kv.needle_v[(size_t)k * d + i] = (float)(p.needle_value * rv.normal());
    }
}

// ---- one token's key (pre-RoPE, added stage by stage) ------------------------------------------------

/// Heavy hitters: tokens carry (1 + key_mean_jitter z_i) of the low-band mean; with sink_mode "mean" the
/// ones with less of it are attended by every sink-seeking query. Reproduces the real SmolLM2 trace's
/// spread along the mean (sd_mu 1.7 against |mu| 11) and its stable top sets (`st1%`, `ovl100`).
void token_mean_jitter(const LayerContext& c, const KvConst& kv, int g, int i, float* k) {
    const SynthParams& p = c.p;
    if (p.key_mean_jitter <= 0 || i < p.sink_tokens) return;
    Rng rj(p.seed, kMeanJitter, (uint64_t)c.layer, (uint64_t)g, (uint64_t)i);
    const float e = (float)(p.key_mean_jitter * rj.normal());
    for (int j = c.B.l_begin; j < c.P; ++j) {
        k[j] += e * kv.mu_k[(size_t)j];
        k[j + c.P] += e * kv.mu_k[(size_t)(j + c.P)];
    }
}

/// Semantic content on band S, scaled by the token's salience ri: topic + word + token-specific parts.
/// Reproduces topical clusters that recur across the context and repeated words (what clustering
/// indexes exploit), the keys' positional locality (`key_cos_near`/`key_cos_far`, RoPE on the middle
/// frequencies plus topic runs) and the spread of the content scores the heads' sharpness scales
/// (`top1%`, `f90`).
void token_semantic(const LayerContext& c, const KvConst& kv, int i, double ri, Rng& r, float* k) {
    const int d = c.d, P = c.P;
    const float* tk = kv.topic_k.data() + (size_t)c.text.topic[(size_t)i] * d;
    const float* wk = kv.word_k.data() + (size_t)c.text.word[(size_t)i] * d;
    for (int j = c.B.s_begin; j < c.B.s_end; ++j) {
        k[j] += (float)(ri * (c.ts * tk[j] + c.ws * wk[j] + c.es * r.normal()));
        k[j + P] += (float)(ri * (c.ts * tk[j + P] + c.ws * wk[j + P] + c.es * r.normal()));
    }
}

/// Sink tokens: no recency carrier (no RoPE ripple on their logit), plus the sink offset ("offset") or
/// without (most of) the low-band mean ("mean"). Reproduces the sink mass on the first tokens, token 0
/// the largest (`sink`; StreamingLLM, and the real trace's token 0 lacking the mean).
void token_sink(const LayerContext& c, const KvConst& kv, int i, float* k) {
    const int d = c.d, P = c.P;
    for (int j = c.B.c_begin; j < c.B.c_end; ++j) {
        k[j] -= kv.mu_k[(size_t)j];
        k[j + P] -= kv.mu_k[(size_t)(j + P)];
    }
    if (c.sink_by_mean) {  // the sink lacks (most of) the low-band key mean
        const double a = i == 0 ? kSinkFirst : kSinkOther;
        for (int j = c.B.l_begin; j < P; ++j) {
            k[j] -= (float)(a * kv.mu_k[(size_t)j]);
            k[j + P] -= (float)(a * kv.mu_k[(size_t)(j + P)]);
        }
    } else {
        const double a = c.A_sink * (i == 0 ? kSinkFirst : kSinkOther);
        for (int j = 0; j < d; ++j) k[j] += (float)(a * kv.e_s[(size_t)j]);
    }
}

/// Token i's post-RoPE key k [d]: mean + isotropic noise (the keys' mean/spread ratio), jitter, semantic
/// content, the needle's key direction (needle retrieval: the targeted needle's logit needle_z sigma_h
/// above the mean), the sink terms, then RoPE at position i.
void token_key(const LayerContext& c, const KvConst& kv, int g, int i, float* k) {
    const SynthParams& p = c.p;
    Rng r(p.seed, kKeyTok, (uint64_t)c.layer, (uint64_t)g, (uint64_t)i);
    // Salience (lognormal, mean 1); sink tokens carry no semantic content (a stable sink logit).
    const double sal = p.key_salience_sigma;
    const double ri = i < p.sink_tokens ? 0.0 : std::exp(sal * r.normal() - 0.5 * sal * sal);
    for (int j = 0; j < c.d; ++j) k[j] = kv.mu_k[(size_t)j] + (float)(p.key_noise * r.normal());
    token_mean_jitter(c, kv, g, i, k);
    token_semantic(c, kv, i, ri, r, k);
    const int nd = c.needle_at[(size_t)i];
    if (nd >= 0) {
        const float* nk = kv.needle_k.data() + (size_t)nd * c.d;
        for (int j = 0; j < c.d; ++j) k[j] += nk[j];
    }
    if (i < p.sink_tokens) token_sink(c, kv, i, k);
    c.rope.rotate(k, i);
}

/// Token i's value v [d]: value mean + topic value (a needle's own value for needle tokens) + noise;
/// sinks scaled down. Values enter only the output error (`out_err`): they have a non-zero mean and
/// topic-level similarity, a needle's value is distinctive, and sink values are small (as in real models).
void token_value(const LayerContext& c, const KvConst& kv, int g, int i, float* v) {
    const SynthParams& p = c.p;
    const int d = c.d, nd = c.needle_at[(size_t)i];
    Rng rv(p.seed, kValTok, (uint64_t)c.layer, (uint64_t)g, (uint64_t)i);
    const float* tv = (nd >= 0 ? kv.needle_v.data() + (size_t)nd * d
                               : kv.topic_v.data() + (size_t)c.text.topic[(size_t)i] * d);
    const float vs = i < p.sink_tokens ? (float)p.sink_value_scale : 1.0f;
    for (int j = 0; j < d; ++j) v[j] = vs * (kv.mu_v[(size_t)j] + tv[j] + (float)(p.value_noise * rv.normal()));
}

}  // namespace

KvConst kv_constants(const LayerContext& c, int g) {
    KvConst kv;
    kv.mu_k = key_mean(c, g);
    kv.e_s = sink_direction(c, kv.mu_k, g);
    kv.mu_v.assign((size_t)c.d, 0.0f);
    Rng r(c.p.seed, kValMean, (uint64_t)c.layer, (uint64_t)g);
    for (int i = 0; i < c.d; ++i) kv.mu_v[(size_t)i] = (float)(c.p.value_mean * r.normal());
    content_vectors(c, g, kv);
    return kv;
}

void synth_kv_head(const LayerContext& c, const KvConst& kv, int g, float* keys, float* values) {
    const int n = c.n, d = c.d;
#pragma omp parallel for schedule(static, 256)
    for (int i = 0; i < n; ++i) {
        token_key(c, kv, g, i, keys + (size_t)i * d);
        token_value(c, kv, g, i, values + (size_t)i * d);
    }
}

}  // namespace retro::synth_detail
