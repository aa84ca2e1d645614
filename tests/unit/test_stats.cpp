// Attention statistics: hand-computed mass counts, top-k, overlaps, Mahalanobis distances on Gaussians,
// and head_stats on a slice whose softmax weights are known exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.hpp"
#include "trace/stats.hpp"

using namespace retro;

TEST(Stats, TokensForMass) {
    const float w[] = {0.05f, 0.3f, 0.1f, 0.5f, 0.05f};  // sorted: .5 .3 .1 .05 .05
    const MassCounts c = tokens_for_mass(w, 5);
    EXPECT_EQ(c.n50, 1);
    EXPECT_EQ(c.n90, 3);
    EXPECT_EQ(c.n99, 5);

    std::vector<float> u(100, 0.01f);  // uniform: 50, 90, 99 tokens
    const MassCounts cu = tokens_for_mass(u.data(), 100);
    EXPECT_EQ(cu.n50, 50);
    EXPECT_EQ(cu.n90, 90);
    EXPECT_EQ(cu.n99, 99);

    // Unnormalized weights: fractions of the total.
    const float v[] = {8, 1, 1};
    const MassCounts cv = tokens_for_mass(v, 3);
    EXPECT_EQ(cv.n50, 1);
    EXPECT_EQ(cv.n90, 2);
    EXPECT_EQ(cv.n99, 3);

    // Softmax of known logits: weights proportional to 2^-i (i = 0..19): 50% -> 1 token, 90% -> 4
    // (1 - 2^-4 = 0.9375), 99% -> 7 (1 - 2^-7 = 0.992).
    std::vector<float> g(20);
    for (int i = 0; i < 20; ++i) g[(size_t)i] = std::ldexp(1.0f, -i);
    const MassCounts cg = tokens_for_mass(g.data(), 20);
    EXPECT_EQ(cg.n50, 1);
    EXPECT_EQ(cg.n90, 4);
    EXPECT_EQ(cg.n99, 7);
}

TEST(Stats, TopKAndOverlap) {
    const float w[] = {0.1f, 0.4f, 0.2f, 0.4f, 0.05f};
    const auto t = top_k_indices(w, 5, 3);
    ASSERT_EQ(t.size(), 3u);
    EXPECT_EQ(t[0], 1);  // tie 0.4/0.4 broken by lower index
    EXPECT_EQ(t[1], 3);
    EXPECT_EQ(t[2], 2);
    EXPECT_EQ(top_k_indices(w, 5, 10).size(), 5u);  // clamped
    EXPECT_NEAR(top_k_mass(w, 5, 2), 0.8, 1e-6);
    EXPECT_NEAR(top_k_mass(w, 5, 100), 1.15, 1e-6);

    const std::vector<int32_t> a = {1, 2, 3, 4}, b = {6, 3, 5, 4};
    EXPECT_DOUBLE_EQ(set_overlap(a, b), 0.5);
    EXPECT_DOUBLE_EQ(set_overlap(a, b, 100), 0.02);
    EXPECT_DOUBLE_EQ(set_overlap(a, a), 1.0);
    EXPECT_DOUBLE_EQ(set_overlap(a, std::vector<int32_t>{7, 8, 9, 10}), 0.0);
}

TEST(Stats, MahalanobisIsotropicGaussian) {
    // Keys ~ N(0, I_d): mean distance ~ sqrt(d - 1/2). Queries = N(0, I) + shift with |shift| = 30:
    // distance ~ sqrt(900 + d), so the ratio is ~ 30.3 / 3.94 = 7.7.
    const int d = 16, n = 20000, m = 2000;
    std::mt19937 rng(5);
    std::normal_distribution<float> N(0.0f, 1.0f);
    std::vector<float> keys((size_t)n * d), q((size_t)m * d);
    for (auto& x : keys) x = N(rng);
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < d; ++j) q[(size_t)i * d + j] = N(rng) + (j == 3 ? 30.0f : 0.0f);
    const KeyDistribution kd(keys.data(), n, d, 1e-6);
    std::vector<double> dk((size_t)n), dq((size_t)m);
    kd.distances(keys.data(), n, dk.data());
    kd.distances(q.data(), m, dq.data());
    double mk = 0, mq = 0;
    for (double x : dk) mk += x / n;
    for (double x : dq) mq += x / m;
    EXPECT_NEAR(mk, std::sqrt(d - 0.5), 0.05);
    EXPECT_NEAR(mq, std::sqrt(900.0 + d), 0.3);
    EXPECT_NEAR(mq / mk, 7.7, 0.15);
    EXPECT_NEAR(kd.trace(), (double)d, 0.5);

    // Affine invariance: scaling the coordinates (anisotropic keys) leaves the distances unchanged.
    std::vector<float> ks = keys, qs = q;
    for (size_t i = 0; i < ks.size(); ++i) ks[i] *= (float)(1 + (i % d));
    for (size_t i = 0; i < qs.size(); ++i) qs[i] *= (float)(1 + (i % d));
    const KeyDistribution kd2(ks.data(), n, d, 1e-6);
    EXPECT_NEAR(kd2.distance(qs.data()), kd.distance(q.data()), 1e-3 * kd.distance(q.data()));

    EXPECT_THROW(KeyDistribution(keys.data(), 1, d), ParamError);
}

TEST(Stats, HeadStatsOnKnownWeights) {
    // d = 4, prompt 8 tokens, 2 steps, one query head. The query is sqrt(d) * e0, so token i's score is
    // keys[i][0]; choosing keys[i][0] = log(w_i) gives softmax weights proportional to w_i.
    HeadSlice s;
    s.head_dim = 4;
    s.prompt_len = 8;
    s.num_steps = 2;
    s.group = 1;
    s.layer = 3;
    s.kv_head = 1;
    s.first_q_head = 1;
    const float wts[10] = {8, 4, 1, 1, 1, 1, 1, 1, 2, 4};  // token 9 is visible at step 1 only
    s.keys.assign(10 * 4, 0.0f);
    s.values.assign(10 * 4, 0.0f);
    for (int i = 0; i < 10; ++i) {
        s.keys[(size_t)i * 4] = std::log(wts[i]);
        s.keys[(size_t)i * 4 + 1 + i % 3] = 0.5f * (float)(i % 5);  // spread for the covariance
    }
    s.queries = {2, 0, 0, 0, 2, 0, 0, 0};
    StatsOptions o;
    o.sink_tokens = 2;
    o.local_tokens = 2;
    o.top_mass_k = 2;
    o.overlap_k = 2;
    o.top_frac = 0.2;
    const auto st = head_stats(s, o);
    ASSERT_EQ(st.size(), 1u);
    const QHeadStats& r = st[0];
    EXPECT_EQ(r.layer, 3);
    EXPECT_EQ(r.kv_head, 1);
    EXPECT_EQ(r.q_head, 1);
    EXPECT_EQ(r.steps, 2);
    // step 0: 9 tokens, total 20: sorted 8,4,2,1x6 -> 50%: 2 (12/20), 90%: 7 (18/20), 99%: 9.
    // step 1: 10 tokens, total 24: sorted 8,4,4,2,1x6 -> 50%: 2 (12/24), 90%: 8 (22/24 >= 21.6), 99%: 10.
    EXPECT_DOUBLE_EQ(r.n50, 2.0);
    EXPECT_DOUBLE_EQ(r.n90, 7.5);
    EXPECT_DOUBLE_EQ(r.n99, 9.5);
    EXPECT_NEAR(r.f90, 0.5 * (7.0 / 9 + 8.0 / 10), 1e-12);
    // sink (tokens 0,1): 12/20 and 12/24; local (last 2): (1+2)/20 and (2+4)/24.
    EXPECT_NEAR(r.sink_mass, 0.5 * (0.6 + 0.5), 1e-6);
    EXPECT_NEAR(r.local_mass, 0.5 * (0.15 + 0.25), 1e-6);
    // top-2 mass: 12/20 and 12/24 (8 + 4 either way).
    EXPECT_NEAR(r.top_mass, 0.5 * (0.6 + 0.5), 1e-6);
    // top 20%: ceil(1.8) = 2 tokens and ceil(2.0) = 2 tokens.
    EXPECT_NEAR(r.top_frac_mass, 0.5 * (0.6 + 0.5), 1e-6);
    // top-2 at step 0 = {0, 1}; at step 1 = {0, 1} (token 9 ties token 1 at 4, lower index wins).
    EXPECT_DOUBLE_EQ(r.overlap, 1.0);
    EXPECT_NEAR(r.static_top_mass, 0.5, 1e-6);  // step 0's top-2 at step 1: 12/24
    EXPECT_NEAR(r.query_cos, 1.0, 1e-12);
    EXPECT_TRUE(std::isfinite(r.ood_ratio));
    EXPECT_GT(r.k_mahal, 0.0);

    o.step_stride = 2;  // only step 0 is chosen; the overlap still uses step 1
    const QHeadStats r2 = head_stats(s, o)[0];
    EXPECT_EQ(r2.steps, 1);
    EXPECT_DOUBLE_EQ(r2.n90, 7.0);
    EXPECT_DOUBLE_EQ(r2.overlap, 1.0);
    EXPECT_TRUE(std::isnan(r2.static_top_mass));

    o.step_stride = 0;
    EXPECT_THROW(head_stats(s, o), ParamError);
}

TEST(Stats, MeanSkipsNaN) {
    QHeadStats a, b;
    a.n90 = 10;
    b.n90 = 20;
    a.overlap = 0.5;
    b.overlap = std::nan("");
    a.steps = 3;
    b.steps = 4;
    const std::vector<QHeadStats> v = {a, b};
    const QHeadStats m = mean_stats(v);
    EXPECT_DOUBLE_EQ(m.n90, 15.0);
    EXPECT_DOUBLE_EQ(m.overlap, 0.5);
    EXPECT_EQ(m.steps, 7);
    EXPECT_EQ(m.layer, -1);
    const auto j = to_json(b);
    EXPECT_TRUE(j["overlap"].is_null());
    EXPECT_DOUBLE_EQ(j["n90"].get<double>(), 20.0);
    EXPECT_TRUE(std::isnan(mean_stats(std::vector<QHeadStats>{}).n90));
}

TEST(Stats, CenteredKeyCosineMeasuresPositionalLocality) {
    // Hand-worked: d = 2, keys (after the sink) alternate +e0 / -e0 around a mean of 0: neighbours are
    // opposite (cos -1), keys 2 apart equal (cos +1). The sink (token 0) is left out.
    const std::vector<float> alt = {100, 100, 1, 0, -1, 0, 1, 0, -1, 0, 1, 0, -1, 0};
    const int dists[3] = {1, 2, 6};
    const std::vector<double> c = centered_key_cosines(alt.data(), 7, 2, 1, dists);
    EXPECT_NEAR(c[0], -1.0, 1e-12);
    EXPECT_NEAR(c[1], 1.0, 1e-12);
    EXPECT_TRUE(std::isnan(c[2]));  // no pair that far apart
    // A slow random walk is local (near > far > 0), independent keys are not (~0).
    const int n = 4000, d = 16;
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> walk((size_t)n * d), iid((size_t)n * d);
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < d; ++j) {
            iid[(size_t)i * d + j] = nd(rng);
            walk[(size_t)i * d + j] = (i ? 0.99f * walk[(size_t)(i - 1) * d + j] : 0.f) + 0.14f * nd(rng);
        }
    const int near_far[2] = {1, 64};
    const std::vector<double> w = centered_key_cosines(walk.data(), n, d, 0, near_far);
    const double near = w[0], far = w[1];
    EXPECT_GT(near, 0.9);
    EXPECT_GT(far, 0.2);
    EXPECT_LT(far, near - 0.3);
    EXPECT_LT(std::abs(centered_key_cosines(iid.data(), n, d, 0, near_far)[0]), 0.05);
}
