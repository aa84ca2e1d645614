// Queries: each GQA group's shared focus and needle schedule, each query head's components, and the
// assembled post-RoPE queries (docs/synth.md, "Queries"); the calibration between them is synth_head.cpp.
#include <algorithm>
#include <cmath>

#include "trace/synth_random.hpp"
#include "trace/synth_stages.hpp"

namespace retro::synth_detail {

namespace {

/// A stationary AR(1) process on the semantic dims over the nq query positions: [nq, sd]. Prefill and
/// decode queries are one continuous process. Reproduces smooth query drift: consecutive queries' cosine
/// (`qcos`), the overlap of consecutive top-100 sets (`ovl100`) and how far step 0's top set stays
/// useful (`st1%`; RetrievalAttention Fig. 2).
std::vector<float> ar_process(const LayerContext& c, Rng& r) {
    const int nq = c.nq, sd = c.sd;
    const double rho = c.p.focus_ar, innov = std::sqrt(std::max(0.0, 1.0 - rho * rho));
    std::vector<float> x((size_t)nq * sd);
    for (int k = 0; k < sd; ++k) x[(size_t)k] = (float)r.normal();
    for (int t = 1; t < nq; ++t)
        for (int k = 0; k < sd; ++k)
            x[(size_t)t * sd + k] = (float)(rho * x[(size_t)(t - 1) * sd + k] + innov * r.normal());
    return x;
}

/// The needle a group targets at each query position (-1 none): a two-state chain (start with
/// needle_rate, keep with needle_persist). Reproduces needle retrieval: isolated tokens far back that
/// some heads attend to at some steps.
std::vector<int> needle_schedule(const LayerContext& c, int g) {
    const SynthParams& p = c.p;
    Rng rs(p.seed, kNeedleSched, (uint64_t)c.layer, (uint64_t)g);
    std::vector<int> tg((size_t)c.nq, -1);
    int cur = -1;
    for (int t = 0; t < c.nq; ++t) {
        const double u = rs.uniform();
        const int pick = c.NN > 0 ? rs.below(c.NN) : -1;
        if (cur >= 0) {
            if (u >= p.needle_persist) cur = -1;
        } else if (c.NN > 0 && u < p.needle_rate) {
            cur = pick;
        }
        // a needle is only targeted once it exists (always true here: needles sit in the prompt)
        tg[(size_t)t] = cur;
    }
    return tg;
}

/// The head's mean offset o_h [d]: norm query_offset, in Z, orthogonal to the sink direction. Z is where
/// keys barely vary, so it moves the queries far from the key distribution while changing the logits only
/// by a constant. Reproduces out-of-distribution queries (`ood` > 10x; RetrievalAttention §2.4, Fig. 3).
std::vector<float> query_offset(const LayerContext& c, const KvConst& kv, int h) {
    const int d = c.d;
    std::vector<float> offset((size_t)d, 0.0f);
    Rng r(c.p.seed, kQueryOffset, (uint64_t)c.layer, (uint64_t)h);
    fill_pairs(r, offset.data(), c.P, c.B.z_begin, c.P, 1.0);
    double dot = 0, nrm = 0;
    for (int j = 0; j < d; ++j) dot += (double)offset[(size_t)j] * kv.e_s[(size_t)j];
    for (int j = 0; j < d; ++j) offset[(size_t)j] -= (float)(dot * kv.e_s[(size_t)j]);
    for (float v : offset) nrm += (double)v * v;
    nrm = std::sqrt(nrm);
    for (float& v : offset) v = nrm > 0 ? (float)(v * c.p.query_offset / nrm) : 0.0f;
    return offset;
}

/// kappa_h: puts a targeted needle's logit about affinity * needle_z * sharpness above the mean.
double needle_coefficient(const LayerContext& c, double sharpness) {
    double needle_energy = 0;
    for (int j = c.B.n_begin; j < c.B.s_end; ++j) needle_energy += 2.0 * kNeedleKeySd * kNeedleKeySd;
    return needle_energy > 0 ? c.p.needle_z * sharpness * std::sqrt((double)c.d) / needle_energy : 0.0;
}

/// The head's queries with the fitted coefficients, rotated to their positions: prefill positions
/// [q0, prompt_len) into prefill_queries [npf, d], decode steps into queries [steps, d] (the head's own rows).
void assemble_queries(const QueryComponents& q, const SynthHeadInfo& info, float* queries,
                      float* prefill_queries) {
    const LayerContext& c = q.c;
    const int d = c.d;
    std::vector<float> x((size_t)d), tmp((size_t)d);
    for (int t = 0; t < c.nq; ++t) {
        const int pos = c.q0 + t;
        q.semantic(t, x.data());
        q.fixed_part(t, info, tmp.data());
        for (int j = 0; j < d; ++j)
            x[(size_t)j] = (float)(info.beta * x[(size_t)j] + info.lambda * q.local[(size_t)j] +
                                   info.sink_coef * q.kv.e_s[(size_t)j]) + tmp[(size_t)j];
        c.rope.rotate(x.data(), pos);
        float* dst = t < c.npf ? prefill_queries + (size_t)t * d : queries + (size_t)(t - c.npf) * d;
        std::copy(x.begin(), x.end(), dst);
    }
}

}  // namespace

GroupQueries group_queries(const LayerContext& c, int g) {
    GroupQueries gq;
    Rng r(c.p.seed, kFocusGroup, (uint64_t)c.layer, (uint64_t)g);
    gq.focus = ar_process(c, r);
    gq.target = needle_schedule(c, g);
    return gq;
}

QueryComponents::QueryComponents(const LayerContext& c_, const KvConst& kv_, const GroupQueries& group_, int h_)
    : c(c_), kv(kv_), group(group_), h(h_), local((size_t)c_.d, 0.0f) {
    Rng rf(c.p.seed, kFocusHead, (uint64_t)c.layer, (uint64_t)h);
    own = ar_process(c, rf);
    // The recency carrier: the key mean's carrier pairs, so the query's lambda term scores
    // lambda K(p - i), a kernel peaked on the last tokens. Reproduces the local mass (`local`) and,
    // with recency_span_factor, its long tail (mass 64-512 tokens back in the real SmolLM2 trace).
    for (int j = c.B.c_begin; j < c.B.c_end; ++j) {
        local[(size_t)j] = kv.mu_k[(size_t)j];
        local[(size_t)(j + c.P)] = kv.mu_k[(size_t)(j + c.P)];
    }
    offset = query_offset(c, kv, h);
}

void QueryComponents::semantic(int t, float* x) const {
    // GQA: the group's focus shared with weight gqa_shared, so a group's heads attend to overlapping
    // tokens (what per-KV-head retrieval relies on); the head's own focus for the rest.
    const double sg = std::sqrt(c.p.gqa_shared), sh = std::sqrt(1.0 - c.p.gqa_shared);
    const int sp = c.B.s_pairs();
    std::fill(x, x + c.d, 0.0f);
    const float* a = group.focus.data() + (size_t)t * c.sd;
    const float* b = own.data() + (size_t)t * c.sd;
    for (int k = 0; k < sp; ++k) {
        const int j = c.B.s_begin + k;
        x[j] = (float)(sg * a[k] + sh * b[k]);
        x[j + c.P] = (float)(sg * a[sp + k] + sh * b[sp + k]);
    }
}

void QueryComponents::fixed_part(int t, const SynthHeadInfo& info, float* y) const {
    // Per-step isotropic noise turns the query from step to step as much as real queries turn (`qcos`,
    // real SmolLM2 0.84); the needle term targets the group's needle at this position.
    Rng rn(c.p.seed, kQueryNoise, (uint64_t)c.layer, (uint64_t)h, (uint64_t)t);
    const double qn = c.p.key_noise * c.p.query_noise_gain;
    for (int j = 0; j < c.d; ++j) y[j] = offset[(size_t)j] + (float)(qn * rn.normal());
    const int nt = group.target[(size_t)t];
    if (nt >= 0 && info.needle_affinity > 0) {
        const float* nk = kv.needle_k.data() + (size_t)nt * c.d;
        const double a = info.needle_affinity * info.needle_coef;
        for (int j = 0; j < c.d; ++j) y[j] += (float)(a * nk[j]);
    }
}

void synth_query_head(const LayerContext& c, const KvConst& kv, const GroupQueries& group, int h,
                      const float* K, SynthHeadInfo& info, float* queries, float* prefill_queries) {
    const QueryComponents q(c, kv, group, h);
    info.needle_coef = needle_coefficient(c, info.sharpness);
    calibrate_head(q, K, info);
    assemble_queries(q, info, queries, prefill_queries);
}

}  // namespace retro::synth_detail
