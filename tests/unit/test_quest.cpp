// Quest: the page score bounds every key's score in the page, full budget equals full attention, the
// last page (current token) is always attended, lists are duplicate-free, page choice by the bound,
// dense layers, traffic and memory accounting.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "core/error.hpp"
#include "methods/params.hpp"
#include "methods/quest.hpp"
#include "metrics/evaluator.hpp"
#include "method_harness.hpp"

using namespace retro;
using namespace retro::method_test;

namespace {

// i.i.d. Gaussian keys and values, queries 1.5·N(0, I).
HeadSlice make_head(int prompt_len, int steps, int d, int group, unsigned seed) {
    return blob_head({.prompt_len = prompt_len, .steps = steps, .d = d, .group = group, .seed = seed,
                      .centers = 0, .query_scale = 1.5f});
}

Replay replay(const HeadSlice& h, const nlohmann::json& params, int layer = 0) {
    return method_test::replay(h, "quest", params, {10}, layer);
}

}  // namespace

TEST(Quest, IsRegisteredWithSourcedDefaults) {
    const MethodInfo& info = find_method("quest");
    const auto p = resolve_params(info, nlohmann::json::object());
    EXPECT_EQ(p.at("k").get<double>(), 2048);
    EXPECT_EQ(p.at("page_size").get<int>(), 16);
    EXPECT_EQ(p.at("gqa").get<std::string>(), "per_head");
    EXPECT_EQ(p.at("dense_layers").get<int>(), 0);
    EXPECT_EQ(p.at("placement").get<std::string>(), "offload");
    for (const auto& s : info.params) EXPECT_FALSE(s.source.empty()) << s.name;
    EXPECT_THROW(resolve_params(info, {{"k", 100.5}}), ConfigError);
    EXPECT_THROW(resolve_params(info, {{"page_size", 0}}), ConfigError);
    EXPECT_THROW(resolve_params(info, {{"gqa", "sum"}}), ConfigError);
}

TEST(Quest, PageScoreBoundsEveryKeyInThePage) {
    std::mt19937 rng(11);
    std::normal_distribution<float> N(0.0f, 1.0f);
    const int d = 64, P = 16;
    int checked = 0;
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<float> keys((size_t)P * d), q((size_t)d);
        const float scale = 0.1f + (float)(trial % 5);
        for (auto& v : keys) v = scale * N(rng) + (trial % 3 == 0 ? 3.0f : 0.0f);
        for (auto& v : q) v = N(rng);
        const int len = 1 + trial % P;  // partial pages too
        std::vector<float> mn(keys.begin(), keys.begin() + d), mx = mn;
        for (int i = 1; i < len; ++i)
            for (int e = 0; e < d; ++e) {
                mn[(size_t)e] = std::min(mn[(size_t)e], keys[(size_t)i * d + e]);
                mx[(size_t)e] = std::max(mx[(size_t)e], keys[(size_t)i * d + e]);
            }
        const float bound = quest_page_bound(q.data(), mn.data(), mx.data(), d);
        float best = -1e30f;
        for (int i = 0; i < len; ++i) {
            const float s = dot(q.data(), keys.data() + (size_t)i * d, d);
            best = std::max(best, s);
            EXPECT_LE(s, bound + 1e-4f * (1.0f + std::abs(bound))) << "trial " << trial << " token " << i;
            ++checked;
        }
        if (len == 1) {
            EXPECT_NEAR(bound, best, 1e-3f * (1.0f + std::abs(best)));  // tight for one key
        }
    }
    EXPECT_GT(checked, 1000);
}

TEST(Quest, FullBudgetEqualsFullAttention) {
    const HeadSlice h = make_head(500, 3, 32, 4, 1);
    for (const char* gqa : {"per_head", "max"}) {
        for (double k : {1e6, 512.0}) {  // every page fits (n <= 503: 32 pages)
            const Replay r = replay(h, {{"k", k}, {"gqa", gqa}});
            for (const auto& step : r.metrics)
                for (const auto& qm : step) {
                    EXPECT_NEAR(qm.out_err, 0.0, 1e-6) << gqa;
                    EXPECT_DOUBLE_EQ(qm.recall[0], 1.0);
                    EXPECT_DOUBLE_EQ(qm.exact_frac, 1.0);
                }
            for (const auto& s : r.sels) EXPECT_EQ(s.scan_ops, 0.0);
        }
    }
}

TEST(Quest, LastPageAlwaysAttendedAndListsAreWholePages) {
    const HeadSlice h = make_head(1000, 20, 32, 4, 2);  // decode crosses page boundaries (1000..1019)
    for (const char* gqa : {"per_head", "max"}) {
        const Replay r = replay(h, {{"k", 64}, {"gqa", gqa}});
        for (int t = 0; t < h.num_steps; ++t) {
            const int n = h.visible(t);
            const int last0 = ((n - 1) / 16) * 16;
            const auto& s = r.sels[(size_t)t];
            ASSERT_EQ(s.exact.size(), std::string(gqa) == "per_head" ? (size_t)h.group : 1u);
            for (const auto& l : s.exact) {
                const std::set<int32_t> ids(l.begin(), l.end());
                EXPECT_EQ(ids.size(), l.size());
                for (int i = last0; i < n; ++i) EXPECT_TRUE(ids.count(i)) << "step " << t << " token " << i;
                EXPECT_TRUE(ids.count(n - 1));                      // the current token
                EXPECT_EQ(l.size(), (size_t)(3 * 16 + (n - last0)));  // 4 pages = 3 chosen + the last
                for (int32_t id : l) {
                    if (id < last0) {
                        EXPECT_TRUE(ids.count((id / 16) * 16) && ids.count((id / 16) * 16 + 15));
                    }
                }
            }
            EXPECT_DOUBLE_EQ(s.scan_ops, 2.0 * (last0 / 16) * h.group);
        }
    }
}

TEST(Quest, ChoosesPagesWithTheLargestBound) {
    HeadSlice h = make_head(800, 1, 32, 2, 3);
    const int d = 32;
    // plant keys aligned with query head 0 in pages 7 and 30 and with head 1 in page 12
    for (int e = 0; e < d; ++e) {
        h.keys[(size_t)(7 * 16 + 3) * d + e] = 6.0f * h.query(0, 0)[e];
        h.keys[(size_t)(30 * 16 + 9) * d + e] = 5.0f * h.query(0, 0)[e];
        h.keys[(size_t)(12 * 16 + 0) * d + e] = 6.0f * h.query(1, 0)[e];
    }
    const Replay per = replay(h, {{"k", 48}});  // 3 pages: 2 chosen + the last
    const std::set<int32_t> h0(per.sels[0].exact[0].begin(), per.sels[0].exact[0].end());
    const std::set<int32_t> h1(per.sels[0].exact[1].begin(), per.sels[0].exact[1].end());
    EXPECT_TRUE(h0.count(7 * 16 + 3));
    EXPECT_TRUE(h0.count(30 * 16 + 9));
    EXPECT_TRUE(h1.count(12 * 16));
    // offloaded: the union of the chosen pages crosses PCIe (3 or 4 distinct pages, 16 tokens each)
    std::set<int> pages;
    for (const auto& l : per.sels[0].exact)
        for (int32_t id : l)
            if (id < 800) pages.insert(id / 16);
    EXPECT_DOUBLE_EQ(per.sels[0].h2d_bytes, (double)pages.size() * 16 * 2 * d * 2);
    ASSERT_EQ(per.sels[0].fetch_units.size(), pages.size());  // pages are the transfer units
    for (size_t i = 0; i < pages.size(); ++i) {
        EXPECT_TRUE(pages.count((int)per.sels[0].fetch_units[i]));
        EXPECT_EQ(per.sels[0].fetch_unit_tokens[i], 16);
    }
    const Replay mx = replay(h, {{"k", 48}, {"gqa", "max"}});
    const std::set<int32_t> shared(mx.sels[0].exact[0].begin(), mx.sels[0].exact[0].end());
    EXPECT_TRUE(shared.count(7 * 16 + 3));
    EXPECT_TRUE(shared.count(12 * 16));
    const Replay gpu = replay(h, {{"k", 48}, {"placement", "gpu"}});
    EXPECT_EQ(gpu.sels[0].h2d_bytes, 0.0);
    EXPECT_GT(gpu.fps[0].gpu_bytes, 801.0 * 2 * d * 2);
}

TEST(Quest, DenseLayersAttendEverything) {
    const HeadSlice h = make_head(600, 2, 32, 2, 4);
    const Replay dense = replay(h, {{"k", 64}, {"dense_layers", 2}}, 1);
    const Replay sparse = replay(h, {{"k", 64}, {"dense_layers", 2}}, 2);
    for (const auto& s : dense.sels) {
        ASSERT_EQ(s.exact.size(), 1u);
        EXPECT_EQ(s.exact[0].size(), 601u + (&s - dense.sels.data()));
    }
    EXPECT_LT(sparse.sels[0].exact[0].size(), 100u);
    // offloaded metadata + the last page on the GPU: (pages x 2 x d + last page tokens x 2 x d) x 2 bytes
    const int n = 602, pages = (n + 15) / 16;
    EXPECT_DOUBLE_EQ(sparse.fps[1].gpu_bytes, (double)pages * 2 * 32 * 2 + (double)(n - (pages - 1) * 16) * 2 * 32 * 2);
}
