// `ctkvr`: exhaustive limit (C' = C, rho = n) gives the exact top rho' (max over the group of softmax),
// static tokens always included, no duplicates, the prefill-query requirement, dynamic centroid update.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "attention/attention.hpp"
#include "core/error.hpp"
#include "methods/params.hpp"
#include "metrics/evaluator.hpp"
#include "method_harness.hpp"

using namespace retro;
using namespace retro::method_test;

namespace {

// i.i.d. Gaussian keys and values, decode and prefill queries 2·N(0, I).
HeadSlice ck_head(int prompt, int steps, int d, int group, int npf, unsigned seed) {
    return blob_head({.prompt_len = prompt, .steps = steps, .d = d, .group = group, .seed = seed,
                      .centers = 0, .query_scale = 2.0f, .prefill = npf});
}

MethodContext ck_ctx(const HeadSlice& h) { return context_of(h); }

std::unique_ptr<Method> make_ck(const nlohmann::json& params) { return make_method("ctkvr", params); }

// Replays every step; checks validity; returns the selections.
std::vector<Selection> ck_replay(Method& m, const HeadSlice& h) { return replay(m, h, "ctkvr", {10}).sels; }

}  // namespace

TEST(Ctkvr, ExhaustiveLimitIsExactTopRhoPrime) {
    const int prompt = 200, steps = 3, d = 8, npf = 16, sink = 3, window = 7, keep = 15;
    for (int group : {1, 3}) {
        const HeadSlice h = ck_head(prompt, steps, d, group, npf, 7 + group);
        auto m = make_ck({{"C", npf}, {"C_prime", npf}, {"rho", 100000}, {"rho_prime", keep}, {"sink", sink},
                          {"window", window}});
        const auto sels = ck_replay(*m, h);
        const int ib = sink, ie = prompt - window, ni = ie - ib;
        const float scale = 1.0f / std::sqrt((float)d);
        for (int t = 0; t < steps; ++t) {
            const int n = prompt + t + 1;
            ASSERT_EQ(sels[(size_t)t].exact.size(), 1u);
            std::set<int32_t> s(sels[(size_t)t].exact[0].begin(), sels[(size_t)t].exact[0].end());
            for (int i = 0; i < sink; ++i) EXPECT_TRUE(s.count(i));
            for (int i = ie; i < n; ++i) EXPECT_TRUE(s.count(i));
            // Reference: max over the group of softmax over the index keys, top `keep`.
            std::vector<float> agg((size_t)ni, 0.0f), sc((size_t)ni);
            for (int g = 0; g < group; ++g) {
                attention_scores(h.query(g, t), h.keys.data() + (size_t)ib * d, ni, d, scale, sc.data());
                softmax_inplace(sc.data(), ni);
                for (int i = 0; i < ni; ++i) agg[(size_t)i] = std::max(agg[(size_t)i], sc[(size_t)i]);
            }
            std::vector<int32_t> idx((size_t)ni);
            for (int i = 0; i < ni; ++i) idx[(size_t)i] = i;
            std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(),
                              [&](int a, int b) { return agg[a] > agg[b] || (agg[a] == agg[b] && a < b); });
            for (int j = 0; j < keep; ++j) EXPECT_TRUE(s.count(ib + idx[(size_t)j])) << "group " << group;
            EXPECT_EQ((int)s.size(), sink + (n - ie) + keep);
            // scan_ops = g*C + g*U with U = all index keys (dedup coefficient U / (C' rho)).
            EXPECT_DOUBLE_EQ(sels[(size_t)t].scan_ops, (double)group * npf + (double)group * ni);
        }
    }
}

TEST(Ctkvr, DefaultsSelectStaticPlusBudgetAndDedup) {
    const HeadSlice h = ck_head(600, 2, 8, 2, 64, 11);
    auto m = make_ck({{"C", 32}, {"C_prime", 4}, {"rho_prime", 20}, {"sink", 4}, {"window", 16}});
    const auto sels = ck_replay(*m, h);
    for (size_t t = 0; t < sels.size(); ++t) {
        const auto& l = sels[t].exact[0];
        const int n = 600 + (int)t + 1;
        EXPECT_EQ((int)l.size(), 4 + (n - 584) + 20);
        // U <= C' * rho = 4 * 50
        const double U = sels[t].scan_ops / 2.0 - 32;
        EXPECT_GE(U, 50);
        EXPECT_LE(U, 200);
    }
    EXPECT_GT(m->footprint().gpu_bytes, 0);
}

TEST(Ctkvr, DynamicUpdateStaysValid) {
    const HeadSlice h = ck_head(400, 6, 8, 2, 8, 12);
    auto m = make_ck({{"C", 8}, {"C_prime", 2}, {"rho_prime", 10}, {"sink", 2}, {"window", 8},
                      {"dynamic_update", true}});
    const auto sels = ck_replay(*m, h);
    EXPECT_EQ(sels.size(), 6u);
}

TEST(Ctkvr, NeedsEnoughPrefillQueries) {
    const HeadSlice h = ck_head(300, 1, 8, 1, 8, 13);
    auto m = make_ck({{"C", 16}, {"sink", 4}, {"window", 16}});
    try {
        m->build(ck_ctx(h), KVView{h.keys.data(), h.values.data(), h.prompt_len, 8});
        FAIL();
    } catch (const ParamError& e) {
        EXPECT_NE(std::string(e.what()).find("'C'"), std::string::npos);
    }
    const MethodInfo& info = find_method("ctkvr");
    EXPECT_THROW(resolve_params(info, {{"C", 4}, {"C_prime", 5}}), ConfigError);
    EXPECT_THROW(resolve_params(info, {{"rho_prime", 10.5}}), ConfigError);  // budget >= 1: integer
}
