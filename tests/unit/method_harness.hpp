#pragma once
// Shared by the method tests: small synthetic heads, a method context for them, and a replay of a
// method over every decode step the way the runner drives it (build, append, select, evaluate), so
// each test file states only what it checks.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/head_run.hpp"
#include "methods/method.hpp"
#include "methods/params.hpp"
#include "metrics/evaluator.hpp"

namespace retro::method_test {

/// Keys in Gaussian blobs around a shared offset, N(0,1) values, queries near blob centres:
///   centre c_b ~ center_scale·N(0, I), offset ~ offset_scale·N(0, I)
///   key   = offset + c_b + key_noise·N(0, I)          (b uniform per token)
///   query = query_scale·c_b + query_noise·N(0, I)     (b uniform per (head, step))
/// `centers` = 0 gives i.i.d. N(0, I) keys and values and query_scale·N(0, I) queries.
/// `prefill` > 0 adds prefill queries for the last `prefill` prompt positions, drawn like decode queries
/// after them.
struct BlobHeadParams {
    int prompt_len = 512;
    int steps = 4;
    int d = 32;
    int group = 4;
    unsigned seed = 1;
    int centers = 24;
    float center_scale = 1.0f;
    float offset_scale = 0.5f;
    float key_noise = 0.4f;
    float query_scale = 2.0f;
    float query_noise = 0.5f;
    int prefill = 0;
};

/// keys/values: [prompt_len + steps, d]; queries: [group, steps, d]; prefill_queries: [group, prefill, d].
inline HeadSlice blob_head(const BlobHeadParams& p) {
    std::mt19937 rng(p.seed);
    std::normal_distribution<float> N(0.0f, 1.0f);
    const int d = p.d;
    HeadSlice h;
    h.head_dim = d;
    h.group = p.group;
    h.prompt_len = p.prompt_len;
    h.num_steps = p.steps;
    const int n = p.prompt_len + p.steps;
    h.keys.resize((size_t)n * d);
    h.values.resize((size_t)n * d);
    h.queries.resize((size_t)p.group * p.steps * d);
    h.num_prefill = p.prefill;
    h.prefill_first_position = p.prompt_len - p.prefill;
    h.prefill_queries.resize((size_t)p.group * p.prefill * d);
    std::vector<float> c((size_t)p.centers * d), off((size_t)d);
    // one query [d]: near a random blob centre, or i.i.d. without blobs
    auto draw_query = [&](float* q) {
        if (p.centers == 0) {
            for (int e = 0; e < d; ++e) q[e] = p.query_scale * N(rng);
            return;
        }
        const int b = (int)(rng() % (unsigned)p.centers);
        for (int e = 0; e < d; ++e) q[e] = p.query_scale * c[(size_t)b * d + e] + p.query_noise * N(rng);
    };
    if (p.centers == 0) {
        for (auto& v : h.keys) v = N(rng);
        for (auto& v : h.values) v = N(rng);
    } else {
        for (auto& v : c) v = p.center_scale * N(rng);
        for (auto& v : off) v = p.offset_scale * N(rng);
        for (int i = 0; i < n; ++i) {
            const int b = (int)(rng() % (unsigned)p.centers);
            for (int e = 0; e < d; ++e) {
                h.keys[(size_t)i * d + e] = off[e] + c[(size_t)b * d + e] + p.key_noise * N(rng);
                h.values[(size_t)i * d + e] = N(rng);
            }
        }
    }
    for (size_t r = 0; r < (size_t)p.group * p.steps; ++r) draw_query(h.queries.data() + r * d);
    for (size_t r = 0; r < (size_t)p.group * p.prefill; ++r) draw_query(h.prefill_queries.data() + r * d);
    return h;
}

/// The context the runner hands a method for this head (head_context, fp16 storage for byte accounting), at
/// layer `layer`.
inline MethodContext context_of(const HeadSlice& h, int layer = 0) {
    MethodContext ctx = head_context(h, DType::f16);
    ctx.layer = layer;
    return ctx;
}

/// A registered method with its parameters resolved (defaults filled, bad values rejected).
inline std::unique_ptr<Method> make_method(const std::string& name, const nlohmann::json& params) {
    const MethodInfo& info = find_method(name);
    return info.make(resolve_params(info, params));
}

struct Replay {
    std::vector<Selection> sels;                      ///< [step]
    std::vector<std::vector<QueryMetrics>> metrics;  ///< [step][group]
    std::vector<Footprint> fps;                       ///< [step]
};

/// Builds `m` over the prompt, then appends and selects every decode step like the runner, evaluating
/// each selection (the evaluator throws on duplicate or out-of-range ids, naming `name`).
/// `built`: `m` is built over this prompt already (a copy from Method::clone_built): no build here.
inline Replay replay(Method& m, const HeadSlice& h, const std::string& name,
                     const std::vector<int>& recall_k = {10, 100}, int layer = 0, bool built = false) {
    const int d = h.head_dim;
    if (!built) m.build(context_of(h, layer), KVView{h.keys.data(), h.values.data(), h.prompt_len, d});
    Evaluator ev(h, recall_k);
    Replay r;
    std::vector<float> q((size_t)h.group * d);
    for (int t = 0; t < h.num_steps; ++t) {
        const KVView kv{h.keys.data(), h.values.data(), h.visible(t), d};
        m.append(kv, h.prompt_len + t);
        for (int g = 0; g < h.group; ++g)
            std::copy(h.query(g, t), h.query(g, t) + d, q.begin() + (size_t)g * d);
        Selection s;
        m.select(q.data(), t, kv, s);
        ev.prepare_step(t);
        std::vector<QueryMetrics> qm;
        ev.evaluate(s, name, qm);
        r.metrics.push_back(qm);
        r.fps.push_back(m.footprint());
        r.sels.push_back(std::move(s));
    }
    return r;
}

/// The same for a registered method made from `params`.
inline Replay replay(const HeadSlice& h, const std::string& name, const nlohmann::json& params,
                     const std::vector<int>& recall_k = {10, 100}, int layer = 0) {
    auto m = make_method(name, params);
    return replay(*m, h, name, recall_k, layer);
}

inline float dot(const float* a, const float* b, int d) {
    float s = 0;
    for (int e = 0; e < d; ++e) s += a[e] * b[e];
    return s;
}

}  // namespace retro::method_test
