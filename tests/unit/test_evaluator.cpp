// Metrics on hand-computed cases: ties, empty selection, full selection, duplicates, estimation.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "core/error.hpp"
#include "metrics/evaluator.hpp"
#include "metrics/metrics.hpp"

using namespace retro;

namespace {
// A head with one query head, head_dim 1, scale 1: scores are q * k_i exactly.
// keys given directly; values v_i = (i, 1) in 2 dims would need d=2, so use d=2 with k = (s_i, 0).
HeadSlice tiny_head(const std::vector<float>& scores, int prompt_len) {
    HeadSlice h;
    h.head_dim = 4;  // scale = 1/sqrt(4) = 0.5 -> store keys as 2*s so q.k*scale = s with q=(1,0,0,0)
    h.group = 1;
    h.prompt_len = prompt_len;
    h.num_steps = (int)scores.size() - prompt_len;
    for (size_t i = 0; i < scores.size(); ++i) {
        h.keys.insert(h.keys.end(), {2.0f * scores[i], 0, 0, 0});
        h.values.insert(h.values.end(), {(float)i, 1.0f, (float)(i % 3), -1.0f});
    }
    for (int t = 0; t < h.num_steps; ++t) h.queries.insert(h.queries.end(), {1, 0, 0, 0});
    return h;
}
Selection sel_of(std::vector<int32_t> ids) {
    Selection s;
    s.shared() = std::move(ids);
    return s;
}
}  // namespace

TEST(Evaluator, RecallWithTiesAtTheKthScore) {
    // scores: token 0..5 = 5, 3, 3, 3, 1, 0 ; top-2 = {0} plus one of the tied 3s.
    HeadSlice h = tiny_head({5, 3, 3, 3, 1, 0}, 5);  // step 0 sees all 6 tokens
    Evaluator ev(h, {2, 4});
    ev.prepare_step(0);
    std::vector<QueryMetrics> m;
    ev.evaluate(sel_of({0, 3}), "t", m);  // any tied token counts
    EXPECT_DOUBLE_EQ(m[0].recall[0], 1.0);
    EXPECT_DOUBLE_EQ(m[0].recall[1], 0.5);  // top-4 = {0,1,2,3}: 2 of 4
    ev.evaluate(sel_of({1, 2, 3}), "t", m);  // three tied tokens cannot count more than k
    EXPECT_DOUBLE_EQ(m[0].recall[0], 1.0);
    EXPECT_DOUBLE_EQ(m[0].recall[1], 0.75);
    ev.evaluate(sel_of({4, 5}), "t", m);
    EXPECT_DOUBLE_EQ(m[0].recall[0], 0.0);
    EXPECT_DOUBLE_EQ(m[0].recall[1], 0.0);
}

TEST(Evaluator, MassAndOutputErrorHandComputed) {
    HeadSlice h = tiny_head({0, 0, std::log(2.0f)}, 2);  // weights 1/4, 1/4, 1/2
    Evaluator ev(h, {1});
    ev.prepare_step(0);
    std::vector<QueryMetrics> m;
    ev.evaluate(sel_of({2}), "t", m);
    EXPECT_NEAR(m[0].mass, 0.5, 1e-6);
    EXPECT_NEAR(m[0].exact_frac, 1.0 / 3, 1e-12);
    EXPECT_DOUBLE_EQ(m[0].recall[0], 1.0);
    // exact o = 1/4 v0 + 1/4 v1 + 1/2 v2 ; approx = v2
    const float o[4] = {0.25f * 0 + 0.25f * 1 + 0.5f * 2, 1, 0.25f * 0 + 0.25f * 1 + 0.5f * 2, -1};
    const float a[4] = {2, 1, 2, -1};
    double num = 0, den = 0;
    for (int j = 0; j < 4; ++j) {
        num += (a[j] - o[j]) * (a[j] - o[j]);
        den += o[j] * o[j];
    }
    EXPECT_NEAR(m[0].out_err, std::sqrt(num / den), 1e-6);
    EXPECT_NEAR(m[0].lse_err, std::abs(std::log(2.0) - std::log(4.0)), 1e-6);
}

TEST(Evaluator, FullSelectionHasZeroError) {
    std::mt19937 rng(3);
    std::normal_distribution<float> N(0, 2);
    std::vector<float> s(300);
    for (auto& x : s) x = N(rng);
    HeadSlice h = tiny_head(s, 290);
    Evaluator ev(h, {10, 100});
    for (int t = 0; t < h.num_steps; ++t) {
        ev.prepare_step(t);
        std::vector<int32_t> all(ev.visible());
        std::iota(all.begin(), all.end(), 0);
        std::vector<QueryMetrics> m;
        ev.evaluate(sel_of(all), "t", m);
        EXPECT_LT(m[0].out_err, 1e-5);
        EXPECT_NEAR(m[0].mass, 1.0, 1e-5);
        EXPECT_NEAR(m[0].out_cos, 1.0, 1e-6);
        EXPECT_LT(m[0].lse_err, 1e-4);
        EXPECT_DOUBLE_EQ(m[0].recall[1], 1.0);
        EXPECT_DOUBLE_EQ(m[0].exact_frac, 1.0);
    }
}

TEST(Evaluator, EmptySelectionIsWorstCase) {
    HeadSlice h = tiny_head({1, 2, 3, 4}, 3);
    Evaluator ev(h, {2});
    ev.prepare_step(0);
    std::vector<QueryMetrics> m;
    ev.evaluate(Selection{}, "t", m);
    EXPECT_DOUBLE_EQ(m[0].recall[0], 0.0);
    EXPECT_DOUBLE_EQ(m[0].mass, 0.0);
    EXPECT_DOUBLE_EQ(m[0].out_err, 1.0);
    EXPECT_DOUBLE_EQ(m[0].out_cos, 0.0);
    EXPECT_TRUE(std::isinf(m[0].lse_err));
    EXPECT_DOUBLE_EQ(m[0].exact_frac, 0.0);
}

TEST(Evaluator, DuplicatesAndOutOfRangeIdsAreRejected) {
    HeadSlice h = tiny_head({1, 2, 3, 4}, 2);  // step 0 sees 3 tokens
    Evaluator ev(h, {1});
    ev.prepare_step(0);
    std::vector<QueryMetrics> m;
    EXPECT_THROW(ev.evaluate(sel_of({0, 1, 0}), "dup", m), Error);
    EXPECT_THROW(ev.evaluate(sel_of({3}), "future", m), Error);  // token 3 not yet visible
    EXPECT_THROW(ev.evaluate(sel_of({-1}), "neg", m), Error);
    try {
        ev.evaluate(sel_of({1, 1}), "mymethod", m);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("mymethod"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("twice"), std::string::npos);
    }
    EXPECT_NO_THROW(ev.evaluate(sel_of({2, 1, 0}), "ok", m));
}

TEST(Evaluator, EstimatedClustersCoverTheRest) {
    // Exact {0}; tokens 1..3 estimated as one cluster with their true mean key and value sum.
    // With identical keys for 1..3 the estimate is exact.
    HeadSlice h = tiny_head({2, 1, 1, 1}, 3);
    Evaluator ev(h, {1});
    ev.prepare_step(0);
    std::vector<float> centroid = {2.0f * 1, 0, 0, 0}, vsum(4, 0.0f);
    for (int i = 1; i < 4; ++i)
        for (int j = 0; j < 4; ++j) vsum[j] += h.values[i * 4 + j];
    Selection s = sel_of({0});
    s.estimated.push_back({centroid.data(), 3.0, vsum.data()});
    std::vector<QueryMetrics> m;
    ev.evaluate(s, "est", m);
    EXPECT_LT(m[0].out_err, 1e-6);
    EXPECT_LT(m[0].lse_err, 1e-6);
    EXPECT_NEAR(m[0].est_frac, 0.75, 1e-12);
    EXPECT_LT(m[0].mass, 1.0);  // estimation does not count as exact mass
}

TEST(Metrics, AggregatePercentilesMatchNumpyLinear) {
    auto a = aggregate({4, 1, 3, 2, 5});
    EXPECT_DOUBLE_EQ(a.mean, 3.0);
    EXPECT_DOUBLE_EQ(a.p50, 3.0);
    EXPECT_DOUBLE_EQ(a.p10, 1.4);  // numpy.percentile([1..5], 10) = 1.4
    EXPECT_DOUBLE_EQ(a.p90, 4.6);
    EXPECT_DOUBLE_EQ(a.min, 1.0);
    EXPECT_EQ(a.count, 5u);
    EXPECT_TRUE(std::isnan(aggregate({}).mean));
}

TEST(Metrics, RegistryHasDescriptionsAndDirections) {
    auto r = metric_registry({10, 100});
    ASSERT_NE(find_metric(r, "recall@100"), nullptr);
    EXPECT_EQ(find_metric(r, "recall@100")->direction, Direction::higher_better);
    EXPECT_EQ(find_metric(r, "out_err")->direction, Direction::lower_better);
    EXPECT_EQ(find_metric(r, "recall@1000"), nullptr);
    for (const auto& m : r) EXPECT_FALSE(m.description.empty()) << m.name;
}

TEST(Evaluator, LogWeightsActAsRepeatedTokens) {
    // Token 2 with log weight log(3) equals token 2 present three times (importance weights).
    HeadSlice h = tiny_head({0.5f, -1.0f, 2.0f, 0.0f, 1.0f}, 4);
    HeadSlice rep = tiny_head({0.5f, -1.0f, 2.0f, 2.0f, 2.0f, 0.0f, 1.0f}, 6);
    for (int j = 0; j < 4; ++j) {  // copy token 2's value into the two repeats
        rep.values[3 * 4 + j] = h.values[2 * 4 + j];
        rep.values[4 * 4 + j] = h.values[2 * 4 + j];
    }
    Evaluator ev(h, {1}), er(rep, {1});
    ev.prepare_step(0);
    er.prepare_step(0);
    Selection s = sel_of({0, 2});
    s.exact_log_weight = {{0.0f, std::log(3.0f)}};
    std::vector<QueryMetrics> m, mr;
    ev.evaluate(s, "w", m);
    er.evaluate(sel_of({0, 2, 3, 4}), "rep", mr);
    // both approximations are the softmax over {s0, s2, s2, s2}: the same lse_hat
    const double lse_hat = std::log(std::exp(0.5) + 3 * std::exp(2.0));
    EXPECT_NEAR(std::abs(lse_hat - ev.reference(0).lse), m[0].lse_err, 1e-5);
    EXPECT_NEAR(std::abs(lse_hat - er.reference(0).lse), mr[0].lse_err, 1e-5);
    // mismatched weight lists are rejected
    s.exact_log_weight = {{0.0f}};
    EXPECT_THROW(ev.evaluate(s, "bad", m), Error);
}
