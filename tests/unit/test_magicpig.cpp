// `magicpig` and SimHash: K = 0 collides everything (exact attention), the importance-sampling estimator
// is unbiased over hash draws, sampling probabilities are right, static tokens always present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "cluster/simhash.hpp"
#include "core/error.hpp"
#include "methods/params.hpp"
#include "metrics/evaluator.hpp"
#include "method_harness.hpp"

using namespace retro;
using namespace retro::method_test;

namespace {

HeadSlice mp_head(int prompt, int steps, int d, int group, unsigned seed, float key_scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> N(0.0f, 1.0f);
    HeadSlice h;
    h.head_dim = d;
    h.group = group;
    h.prompt_len = prompt;
    h.num_steps = steps;
    const int n = prompt + steps;
    std::vector<float> off((size_t)d);
    for (auto& v : off) v = N(rng);
    h.keys.resize((size_t)n * d);
    h.values.resize((size_t)n * d);
    for (int i = 0; i < n; ++i)
        for (int e = 0; e < d; ++e) {
            h.keys[(size_t)i * d + e] = off[(size_t)e] + key_scale * N(rng);
            h.values[(size_t)i * d + e] = N(rng);
        }
    h.queries.resize((size_t)group * steps * d);
    for (auto& v : h.queries) v = 1.5f * N(rng);
    return h;
}

MethodContext mp_ctx(const HeadSlice& h, unsigned seed) {
    MethodContext ctx = context_of(h);
    ctx.seed = seed;
    return ctx;
}

std::unique_ptr<Method> make_mp(const nlohmann::json& params) { return make_method("magicpig", params); }

Selection select_step0(Method& m, const HeadSlice& h) {
    const int d = h.head_dim, n = h.prompt_len + 1;
    m.append(KVView{h.keys.data(), h.values.data(), n, d}, h.prompt_len);
    std::vector<float> q((size_t)h.group * d);
    for (int g = 0; g < h.group; ++g) std::copy(h.query(g, 0), h.query(g, 0) + d, q.begin() + g * d);
    Selection sel;
    m.select(q.data(), 0, KVView{h.keys.data(), h.values.data(), n, d}, sel);
    return sel;
}

}  // namespace

TEST(SimHash, SampleProbability) {
    // m = 2: closed form 1 - (1-x)^L - L x (1-x)^(L-1).
    for (double c : {-0.5, 0.0, 0.3, 0.9}) {
        const int K = 4, L = 12;
        const double x = std::pow(1.0 - std::acos(c) / M_PI, K);
        const double ref = 1.0 - std::pow(1 - x, L) - L * x * std::pow(1 - x, L - 1);
        EXPECT_NEAR(simhash_sample_probability(c, K, L, 2), ref, 1e-12);
    }
    EXPECT_DOUBLE_EQ(simhash_sample_probability(0.2, 0, 5, 2), 1.0);
    EXPECT_DOUBLE_EQ(simhash_sample_probability(0.2, 3, 5, 6), 0.0);
    // Tiny probabilities keep their relative accuracy: ~ C(L,2) x^2 for small x.
    const double c = -0.9;
    const double x = std::pow(1.0 - std::acos(c) / M_PI, 10);
    const double approx = 150.0 * 149.0 / 2.0 * x * x * std::pow(1 - x, 148);
    EXPECT_NEAR(simhash_sample_probability(c, 10, 150, 2) / approx, 1.0, 1e-3);
}

TEST(SimHash, EmpiricalCollisionRate) {
    // One base vector, one query at a known angle: the bucket-sharing rate over many hash draws matches x.
    const int d = 6, K = 3, L = 1;
    std::vector<float> k = {1, 0, 0, 0, 0, 0}, q = {0.6f, 0.8f, 0, 0, 0, 0};
    const double x = std::pow(1.0 - std::acos(0.6) / M_PI, K);
    int hits = 0;
    const int draws = 3000;
    for (int s = 0; s < draws; ++s) {
        SimHashTables t;
        t.build(k.data(), 1, d, {K, L, (uint64_t)s});
        uint32_t qc;
        t.codes(q.data(), &qc);
        std::vector<uint32_t> cnt(1, 0);
        std::vector<int32_t> touched;
        t.collide(&qc, cnt, touched);
        hits += (int)cnt[0];
    }
    EXPECT_NEAR(hits / (double)draws, x, 0.03);
}

TEST(MagicPig, KZeroIsExactAttention) {
    const HeadSlice h = mp_head(120, 2, 8, 2, 3);
    auto m = make_mp({{"K", 0}, {"L", 3}, {"sink", 2}, {"window", 5}});
    m->build(mp_ctx(h, 1), KVView{h.keys.data(), h.values.data(), h.prompt_len, h.head_dim});
    const Selection sel = select_step0(*m, h);
    Evaluator ev(h, {10});
    ev.prepare_step(0);
    std::vector<QueryMetrics> qm;
    ev.evaluate(sel, "magicpig", qm);
    for (int g = 0; g < h.group; ++g) {
        EXPECT_EQ((int)sel.exact[(size_t)g].size(), h.prompt_len + 1);
        for (float w : sel.exact_log_weight[(size_t)g]) EXPECT_NEAR(w, 0.0f, 1e-6f);
        EXPECT_LT(qm[(size_t)g].out_err, 1e-5);
        EXPECT_NEAR(qm[(size_t)g].recall[0], 1.0, 1e-12);
    }
}

TEST(MagicPig, StaticTokensAndNoDuplicates) {
    const HeadSlice h = mp_head(300, 1, 8, 2, 4);
    auto m = make_mp({{"K", 3}, {"L", 8}, {"sink", 4}, {"window", 10}});
    m->build(mp_ctx(h, 2), KVView{h.keys.data(), h.values.data(), h.prompt_len, h.head_dim});
    const Selection sel = select_step0(*m, h);
    Evaluator ev(h, {10});
    ev.prepare_step(0);
    std::vector<QueryMetrics> qm;
    ev.evaluate(sel, "magicpig", qm);  // throws on duplicates or bad weights
    for (int g = 0; g < h.group; ++g) {
        std::set<int32_t> s(sel.exact[(size_t)g].begin(), sel.exact[(size_t)g].end());
        EXPECT_EQ(s.size(), sel.exact[(size_t)g].size());
        for (int i = 0; i < 4; ++i) EXPECT_TRUE(s.count(i));
        for (int i = 290; i <= 300; ++i) EXPECT_TRUE(s.count(i));
        EXPECT_LT(s.size(), 301u);  // it samples
        for (size_t j = 0; j < sel.exact[(size_t)g].size(); ++j) {
            const int32_t id = sel.exact[(size_t)g][j];
            if (id < 4 || id >= 290) EXPECT_EQ(sel.exact_log_weight[(size_t)g][j], 0.0f);
            else EXPECT_GE(sel.exact_log_weight[(size_t)g][j], 0.0f);  // -log p >= 0
        }
    }
    EXPECT_GT(sel.scan_ops, 0);
    EXPECT_GT(m->footprint().cpu_bytes, 0);
}

TEST(MagicPig, EstimatorIsUnbiasedOverHashDraws) {
    // Mean over hash draws of the importance-weighted numerator sum_S e^{s_i} w_i v_i and denominator
    // sum_S e^{s_i} w_i converges to the exact ones (static tokens exact, w = 1 there).
    const int d = 8;
    const HeadSlice h = mp_head(200, 1, d, 1, 5, 1.0f);
    const int n = h.prompt_len + 1;
    const float scale = 1.0f / std::sqrt((float)d);
    const float* q = h.query(0, 0);
    double Z = 0;
    std::vector<double> N((size_t)d, 0.0);
    for (int i = 0; i < n; ++i) {
        double s = 0;
        for (int e = 0; e < d; ++e) s += q[e] * h.keys[(size_t)i * d + e];
        const double w = std::exp(scale * s);
        Z += w;
        for (int e = 0; e < d; ++e) N[(size_t)e] += w * h.values[(size_t)i * d + e];
    }
    const int draws = 1500;
    double Zm = 0, frac = 0;
    std::vector<double> Nm((size_t)d, 0.0);
    for (int r = 0; r < draws; ++r) {
        auto m = make_mp({{"K", 3}, {"L", 6}, {"sink", 2}, {"window", 4}});
        m->build(mp_ctx(h, 1000u + r), KVView{h.keys.data(), h.values.data(), h.prompt_len, d});
        const Selection sel = select_step0(*m, h);
        const auto& ids = sel.exact[0];
        const auto& lw = sel.exact_log_weight[0];
        frac += ids.size() / (double)n / draws;
        for (size_t j = 0; j < ids.size(); ++j) {
            double s = 0;
            for (int e = 0; e < d; ++e) s += q[e] * h.keys[(size_t)ids[j] * d + e];
            const double w = std::exp(scale * s + lw[j]);
            Zm += w / draws;
            for (int e = 0; e < d; ++e) Nm[(size_t)e] += w * h.values[(size_t)ids[j] * d + e] / draws;
        }
    }
    EXPECT_LT(frac, 0.9);  // a real sample, not everything
    EXPECT_NEAR(Zm / Z, 1.0, 0.03);
    double err = 0, nn = 0;
    for (int e = 0; e < d; ++e) err += std::pow(Nm[(size_t)e] - N[(size_t)e], 2), nn += N[(size_t)e] * N[(size_t)e];
    EXPECT_LT(std::sqrt(err / nn), 0.08);
}

TEST(MagicPig, Parameters) {
    const MethodInfo& info = find_method("magicpig");
    EXPECT_THROW(resolve_params(info, {{"L", 1}}), ConfigError);  // min_collisions 2 > L
    EXPECT_THROW(resolve_params(info, {{"K", 31}}), ConfigError);
    EXPECT_NO_THROW(resolve_params(info, {{"K", 9}, {"L", 120}}));
}
