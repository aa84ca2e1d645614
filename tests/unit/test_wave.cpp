// The wave method and its index: full retrieval equals full attention, the Jensen bound of Eq. 3,
// one-token clusters estimate exactly, zones and budgets, index updates append, determinism, parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "cluster/wave_index.hpp"
#include "core/error.hpp"
#include "methods/params.hpp"
#include "metrics/evaluator.hpp"
#include "method_harness.hpp"

using namespace retro;
using namespace retro::method_test;

namespace {

// A head with clustered keys (a shared offset, blobs, noise), random values and queries near blobs.
HeadSlice make_head(int prompt_len, int steps, int d, int group, unsigned seed) {
    return blob_head({.prompt_len = prompt_len, .steps = steps, .d = d, .group = group, .seed = seed,
                      .centers = 64, .center_scale = 1.5f, .offset_scale = 1.0f, .key_noise = 0.5f,
                      .query_scale = 1.5f, .query_noise = 0.5f});
}

Replay replay(const HeadSlice& h, const nlohmann::json& params) { return method_test::replay(h, "wave", params); }

}  // namespace

TEST(Wave, IsRegisteredWithSourcedDefaults) {
    const MethodInfo& info = find_method("wave");
    const auto p = resolve_params(info, nlohmann::json::object());
    EXPECT_EQ(p.at("tokens_per_cluster").get<double>(), 16);
    EXPECT_EQ(p.at("segment").get<int>(), 8192);
    EXPECT_EQ(p.at("iters").get<int>(), 10);
    EXPECT_DOUBLE_EQ(p.at("retrieval").get<double>(), 0.018);
    EXPECT_DOUBLE_EQ(p.at("estimation").get<double>(), 0.232);
    EXPECT_EQ(p.at("sink").get<int>(), 4);
    EXPECT_EQ(p.at("window").get<int>(), 64);
    EXPECT_EQ(p.at("gqa").get<std::string>(), "sum");
    EXPECT_TRUE(p.at("center_keys").get<bool>());
    EXPECT_EQ(p.at("final_assign").get<std::string>(), "probe");
    EXPECT_EQ(p.at("final_radius").get<int>(), 1);
    EXPECT_EQ(p.at("final_lists").get<int>(), 0);
    EXPECT_EQ(p.at("final_probe").get<int>(), 4);
    EXPECT_FALSE(p.at("normalize_init").get<bool>());
    EXPECT_EQ(p.at("update_segment").get<int>(), 1024);
    for (const auto& s : info.params) EXPECT_FALSE(s.source.empty()) << s.name;
}

TEST(Wave, RejectsImpossibleParametersNamingThem) {
    const MethodInfo& info = find_method("wave");
    auto expect_error = [&](const nlohmann::json& j, const std::string& name) {
        try {
            resolve_params(info, j);
            FAIL() << "accepted " << j.dump();
        } catch (const ConfigError& e) {
            EXPECT_NE(std::string(e.what()).find("'" + name + "'"), std::string::npos) << e.what();
        }
    };
    expect_error({{"segment", 8}}, "segment");
    expect_error({{"update_segment", 4}}, "update_segment");
    expect_error({{"retrieval", 0.5}, {"estimation", 0.6}}, "retrieval");
    expect_error({{"retrieval", 2.5}}, "retrieval");
    expect_error({{"iters", 0}}, "iters");
    expect_error({{"gqa", "min"}}, "gqa");
    expect_error({{"tokens_per_cluster", 0.5}}, "tokens_per_cluster");
    EXPECT_NO_THROW(resolve_params(info, {{"segment", 0}, {"update_segment", 0}, {"estimation", 0}}));
}

TEST(Wave, RetrievingEveryClusterEqualsFullAttention) {
    const HeadSlice h = make_head(3000, 3, 32, 4, 1);
    for (const char* gqa : {"sum", "max", "mean"}) {
        const auto r = replay(h, {{"retrieval", 1e9}, {"segment", 1024}, {"gqa", gqa}});
        for (size_t t = 0; t < r.sels.size(); ++t) {
            EXPECT_EQ((int)r.sels[t].exact[0].size(), h.visible((int)t));
            EXPECT_TRUE(r.sels[t].estimated.empty());
            for (const auto& m : r.metrics[t]) {
                EXPECT_NEAR(m.mass, 1.0, 1e-5);
                EXPECT_LT(m.out_err, 1e-5);
                EXPECT_DOUBLE_EQ(m.recall[1], 1.0);
            }
        }
    }
}

TEST(Wave, JensenBoundHoldsForEveryCluster) {
    // Eq. 3: exp(q.c/sqrt(d)) <= mean over the cluster of exp(q.k/sqrt(d)) when c is the mean key.
    const int n = 4000, d = 32;
    const HeadSlice h = make_head(n, 1, d, 1, 2);
    WaveIndex idx;
    KMeansParams p;
    p.segment = 1000;
    idx.add_block(h.keys.data(), h.values.data(), d, 0, n, p);
    std::mt19937 rng(3);
    std::normal_distribution<float> N(0.0f, 1.0f);
    const double scale = 1.0 / std::sqrt((double)d);
    int checked = 0;
    for (int trial = 0; trial < 20; ++trial) {
        std::vector<float> q((size_t)d);
        for (auto& v : q) v = 2.0f * N(rng);
        for (int c = 0; c < idx.num_clusters(); ++c) {
            if (idx.size(c) == 0) continue;
            double sc = 0, mean_exp = 0;
            for (int e = 0; e < d; ++e) sc += (double)q[e] * idx.centroid(c)[e];
            for (int t : idx.members(c)) {
                double s = 0;
                for (int e = 0; e < d; ++e) s += (double)q[e] * h.key(t)[e];
                mean_exp += std::exp(s * scale);
            }
            mean_exp /= idx.size(c);
            ASSERT_LE(std::exp(sc * scale), mean_exp * (1 + 1e-5)) << "cluster " << c;
            ++checked;
        }
    }
    EXPECT_GT(checked, 1000);
}

TEST(Wave, OneTokenClustersEstimateExactly) {
    // Index level: clusters of one token each, all estimated, give exact attention.
    const int n = 300, d = 16;
    HeadSlice h = make_head(n, 1, d, 2, 4);
    KMeansResult kr;
    kr.n = kr.k = n;
    kr.d = d;
    kr.plan = kmeans_plan(n, KMeansParams{.k = n, .segment = 0});
    kr.assign.resize((size_t)n);
    kr.sizes.assign((size_t)n, 1);
    kr.centroids.resize((size_t)n * d);
    for (int i = 0; i < n; ++i) {
        const int c = n - 1 - i;  // any bijection token -> cluster
        kr.assign[(size_t)i] = c;
        std::copy(h.key(i), h.key(i) + d, kr.centroids.begin() + (size_t)c * d);
    }
    WaveIndex idx(d);
    idx.append(kr, h.values.data(), 0);
    Selection s;
    s.shared() = {n};  // the decode token, exact
    for (int c = 0; c < n; ++c) {
        ASSERT_EQ(idx.members(c).size(), 1u);
        const int t = idx.members(c)[0];
        ASSERT_EQ(t, n - 1 - c);
        for (int e = 0; e < d; ++e) ASSERT_EQ(idx.value_sum(c)[e], h.value(t)[e]);
        s.estimated.push_back({idx.centroid(c), 1.0, idx.value_sum(c)});
    }
    Evaluator ev(h, {10});
    ev.prepare_step(0);
    std::vector<QueryMetrics> m;
    ev.evaluate(s, "wave", m);
    for (const auto& q : m) {
        EXPECT_LT(q.out_err, 1e-5);
        EXPECT_LT(q.lse_err, 1e-5);
    }

    // Method level: orthogonal keys make spherical k-means with one token per cluster give singletons;
    // estimating every cluster (no retrieval, no window) is then exact.
    const int p = 48, dd = 64;
    HeadSlice o;
    o.head_dim = dd;
    o.group = 2;
    o.prompt_len = p;
    o.num_steps = 2;
    std::mt19937 rng(5);
    std::normal_distribution<float> N(0.0f, 1.0f);
    o.keys.assign((size_t)(p + 2) * dd, 0.0f);
    for (int i = 0; i < p + 2; ++i) o.keys[(size_t)i * dd + i] = 3.0f + 0.1f * (float)(i % 5);
    o.values.resize((size_t)(p + 2) * dd);
    for (auto& v : o.values) v = N(rng);
    o.queries.resize((size_t)2 * 2 * dd);
    for (auto& v : o.queries) v = 2.0f * N(rng);
    const auto r = replay(o, {{"tokens_per_cluster", 1}, {"segment", 0}, {"retrieval", 0},
                              {"estimation", 1e9}, {"sink", 0}, {"window", 0}, {"update_segment", 0}});
    for (size_t t = 0; t < r.sels.size(); ++t) {
        EXPECT_EQ(r.sels[t].estimated.size(), (size_t)p);
        EXPECT_EQ(r.sels[t].exact[0].size(), t + 1);  // the decode tokens
        for (const auto& q : r.metrics[t]) EXPECT_LT(q.out_err, 1e-5);
    }
}

TEST(Wave, ZonesBudgetsAndTraffic) {
    const int prompt = 6000, d = 32;
    const HeadSlice h = make_head(prompt, 2, d, 4, 6);
    const auto r = replay(h, {{"segment", 2048}});
    // clustered: prompt minus 4 sink and 64 window tokens
    const int k = kmeans_plan(prompt - 68, KMeansParams{.segment = 2048}).k;
    ASSERT_EQ(k, 371);  // round(5932 / 16)
    const int nr = std::max(1L, std::lround(0.018 * k)), ne = (int)std::lround(0.232 * k);
    for (size_t t = 0; t < r.sels.size(); ++t) {
        const Selection& s = r.sels[t];
        const int n = h.visible((int)t);
        ASSERT_EQ(s.exact.size(), 1u);
        const auto& ids = s.exact[0];
        std::set<int> u(ids.begin(), ids.end());
        EXPECT_EQ(u.size(), ids.size());
        for (int i = 0; i < 4; ++i) EXPECT_TRUE(u.count(i));
        for (int i = prompt - 64; i < n; ++i) EXPECT_TRUE(u.count(i));
        const int steady = 4 + 64 + (int)t + 1;
        const int retrieved = (int)ids.size() - steady;
        EXPECT_GT(retrieved, 0);
        EXPECT_EQ(s.estimated.size(), (size_t)ne);
        double est_tokens = 0;
        for (const auto& c : s.estimated) est_tokens += c.size;
        EXPECT_GT(est_tokens, 0);
        EXPECT_LE(est_tokens + retrieved, prompt - 68);
        EXPECT_DOUBLE_EQ(s.scan_ops, (double)k * 4);
        EXPECT_DOUBLE_EQ(s.h2d_bytes, retrieved * 2.0 * d * 2);
        EXPECT_DOUBLE_EQ(s.d2h_bytes, nr * 8.0);
        EXPECT_DOUBLE_EQ(r.fps[t].gpu_bytes, steady * 2.0 * d * 2 + k * (2.0 * d + 1) * 2);
        for (const auto& m : r.metrics[t]) {
            EXPECT_GT(m.est_frac, 0);
            EXPECT_LT(m.out_err, 1.0);
        }
    }
    // Estimation improves the output at equal retrieval (the point of the estimation zone).
    const auto no_est = replay(h, {{"segment", 2048}, {"estimation", 0}});
    double e_with = 0, e_without = 0;
    for (size_t t = 0; t < r.sels.size(); ++t)
        for (int g = 0; g < 4; ++g) {
            e_with += r.metrics[t][(size_t)g].out_err;
            e_without += no_est.metrics[t][(size_t)g].out_err;
            EXPECT_TRUE(no_est.sels[t].estimated.empty());
            auto a = no_est.sels[t].exact[0], b = r.sels[t].exact[0];
            std::sort(a.begin(), a.end());
            std::sort(b.begin(), b.end());
            EXPECT_EQ(a, b);  // same retrieval zone
        }
    EXPECT_LT(e_with, e_without);
}

TEST(Wave, ShortPromptStaysInTheSteadyZone) {
    // Fewer than update_segment tokens outside sink + window: no index, everything exact.
    const HeadSlice h = make_head(700, 2, 16, 2, 7);
    const auto r = replay(h, {});
    for (size_t t = 0; t < r.sels.size(); ++t) {
        EXPECT_EQ((int)r.sels[t].exact[0].size(), h.visible((int)t));
        EXPECT_TRUE(r.sels[t].estimated.empty());
        EXPECT_EQ(r.sels[t].scan_ops, 0);
        EXPECT_EQ(r.sels[t].h2d_bytes, 0);
    }
}

TEST(Wave, IndexUpdatesAppendClustersWithoutTouchingOldOnes) {
    const int d = 16;
    const HeadSlice h = make_head(2000, 1, d, 1, 8);
    WaveIndex idx;
    KMeansParams p;
    p.segment = 512;
    idx.add_block(h.keys.data(), h.values.data(), d, 10, 1200, p);
    const auto c0 = idx.centroids();
    const auto v0 = idx.value_sums();
    const auto s0 = idx.sizes();
    const auto o0 = idx.offsets();
    const auto m0 = idx.member_array();
    KMeansParams u;
    u.segment = 0;
    u.k = 16;
    idx.add_block(h.keys.data(), h.values.data(), d, 1200, 1456, u);
    idx.add_block(h.keys.data(), h.values.data(), d, 1456, 1712, u);
    ASSERT_EQ(idx.blocks().size(), 3u);
    EXPECT_EQ(idx.blocks()[1].cluster_begin, (int)s0.size());
    EXPECT_EQ(idx.blocks()[2].cluster_end, (int)s0.size() + 32);
    EXPECT_EQ(idx.num_tokens(), 1702);
    EXPECT_TRUE(std::equal(c0.begin(), c0.end(), idx.centroids().begin()));
    EXPECT_TRUE(std::equal(v0.begin(), v0.end(), idx.value_sums().begin()));
    EXPECT_TRUE(std::equal(s0.begin(), s0.end(), idx.sizes().begin()));
    EXPECT_TRUE(std::equal(o0.begin(), o0.end(), idx.offsets().begin()));
    EXPECT_TRUE(std::equal(m0.begin(), m0.end(), idx.member_array().begin()));
    // every token of the new blocks is in exactly one new cluster
    std::vector<int> seen(2000, 0);
    for (int c = 0; c < idx.num_clusters(); ++c)
        for (int t : idx.members(c)) ++seen[(size_t)t];
    for (int t = 0; t < 2000; ++t) EXPECT_EQ(seen[(size_t)t], (t >= 10 && t < 1712) ? 1 : 0) << t;
}

TEST(Wave, DecodeUpdatesKeepTheSteadyZoneBoundedAndCoverEverything) {
    // prompt 600: 600 - 68 = 532 >= 256 tokens are clustered at build; then 700 decode steps with an
    // update every 256 tokens beyond the window.
    const int d = 16;
    const HeadSlice h = make_head(600, 700, d, 2, 9);
    const auto all = replay(h, {{"update_segment", 256}, {"retrieval", 1e9}});
    const auto def = replay(h, {{"update_segment", 256}});
    size_t max_steady = 0;
    for (size_t t = 0; t < all.sels.size(); ++t) {
        const int n = h.visible((int)t);
        EXPECT_EQ((int)all.sels[t].exact[0].size(), n);  // every token exactly once
        for (const auto& m : all.metrics[t]) EXPECT_LT(m.out_err, 1e-5);
        // steady zone = exact minus retrieved; retrieved = h2d / token bytes
        const size_t retrieved = (size_t)std::lround(def.sels[t].h2d_bytes / (2.0 * d * 2));
        max_steady = std::max(max_steady, def.sels[t].exact[0].size() - retrieved);
    }
    EXPECT_LE(max_steady, (size_t)(4 + 64 + 256 + 1));
    EXPECT_GE(max_steady, (size_t)(4 + 64 + 255));
    // clusters scored grow with the updates: 600-68 = 532 tokens -> 33 clusters, + 16 per update
    EXPECT_DOUBLE_EQ(def.sels.front().scan_ops, 33.0 * 2);
    EXPECT_GT(def.sels.back().scan_ops, 33.0 * 2);
    EXPECT_DOUBLE_EQ(std::fmod(def.sels.back().scan_ops / 2 - 33, 16.0), 0.0);
}

TEST(Wave, DeterministicWithFixedSeed) {
    const HeadSlice h = make_head(5000, 3, 32, 4, 10);
    for (int seed : {0, 7}) {
        const nlohmann::json p = {{"segment", 1024}, {"seed", seed}};
        const auto a = replay(h, p), b = replay(h, p);
        for (size_t t = 0; t < a.sels.size(); ++t) {
            EXPECT_EQ(a.sels[t].exact, b.sels[t].exact);
            ASSERT_EQ(a.sels[t].estimated.size(), b.sels[t].estimated.size());
            for (size_t i = 0; i < a.sels[t].estimated.size(); ++i)
                EXPECT_EQ(a.sels[t].estimated[i].size, b.sels[t].estimated[i].size);
        }
    }
}

TEST(Wave, GqaRankingModes) {
    // Three one-token clusters A, B, C (orthogonal keys) and two query heads with chosen logits; one
    // retrieved cluster. sum = Σ softmax, max = max softmax, mean = mean of the logits.
    auto pick = [](const std::vector<float>& l0, const std::vector<float>& l1, const char* gqa) {
        const int d = 4;  // scale 1/2: q[X] = 2 * logit for key e_X
        HeadSlice h;
        h.head_dim = d;
        h.group = 2;
        h.prompt_len = 3;
        h.num_steps = 1;
        h.keys = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0};
        h.values.assign(16, 1.0f);
        h.queries = {2 * l0[0], 2 * l0[1], 2 * l0[2], 0, 2 * l1[0], 2 * l1[1], 2 * l1[2], 0};
        const auto r = replay(h, {{"tokens_per_cluster", 1}, {"segment", 0}, {"retrieval", 1},
                                  {"estimation", 0}, {"sink", 0}, {"window", 0}, {"update_segment", 0},
                                  {"gqa", gqa}});
        const auto& ids = r.sels[0].exact[0];
        EXPECT_EQ(ids.size(), 2u);  // the decode token + the retrieved cluster's token
        for (int t : ids)
            if (t < 3) return t;
        return -1;
    };
    // head 0: A 0.73, B 0.27; head 1: B 0.5, C 0.5 -> sum: B (0.77), max: A (0.73), mean logits: B
    const std::vector<float> a0 = {10, 9, 0}, a1 = {-30, 0, 0};
    EXPECT_EQ(pick(a0, a1, "sum"), 1);
    EXPECT_EQ(pick(a0, a1, "max"), 0);
    EXPECT_EQ(pick(a0, a1, "mean"), 1);
    // head 1 now prefers C strongly: sum and max pick C (0.95), the mean of logits still B (4.5)
    const std::vector<float> b1 = {-30, 0, 3};
    EXPECT_EQ(pick(a0, b1, "sum"), 2);
    EXPECT_EQ(pick(a0, b1, "max"), 2);
    EXPECT_EQ(pick(a0, b1, "mean"), 1);
}
