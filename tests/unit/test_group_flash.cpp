// The fused single-pass group kernel (lib/attention/group_flash, issue 17) against the per-head path of
// attention.hpp: group sizes 1, 4, 8; token counts below, at and across the block size; AVX2 and portable
// kernels; shared and per-member lists, log weights, -inf and very large scores; and its exp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "attention/attention.hpp"
#include "attention/group_attention.hpp"
#include "attention/group_flash.hpp"
#include "attention/group_flash_kernels.hpp"
#include "group_test_data.hpp"

using namespace retro;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();

using Data = test::RandomGroup;
using test::make_random_group;
using test::rel_l2;
// The kernels a run can take: the portable loops always, AVX2 where this CPU has it (d % 16 == 0).
std::vector<bool> portable_choices() { return {true, false}; }

// A member's partial against partial_attention_ids over the same tokens and log weights.
void expect_partial_eq(const PartialAttention& p, const PartialAttention& ref, int d, const std::string& what) {
    ASSERT_EQ(p.empty(), ref.empty()) << what;
    if (ref.empty()) return;
    std::vector<float> a((size_t)d), b((size_t)d);
    p.output(a.data());
    ref.output(b.data());
    EXPECT_LT(rel_l2(a.data(), b.data(), d), 2e-5) << what;
    EXPECT_NEAR(p.lse(), ref.lse(), 2e-5 * (1 + std::abs(ref.lse()))) << what;
}
}  // namespace

// Scores, weights, outputs and lse of the whole group equal the per-head exact attention, for n below
// the block size, at it, and not a multiple of it, with both kernel sets and a d the AVX2 kernels do not
// take (40).
TEST(GroupFlash, ExactAttentionEqualsPerHeadForGroupSizesAndBlockEdges) {
    for (int g : {1, 4, 8})
        for (int d : {64, 40})
            for (int n : {1, 7, kFlashBlock - 1, kFlashBlock, 2 * kFlashBlock + 5, 1000})
                for (bool portable : portable_choices()) {
                    const std::string what = "g=" + std::to_string(g) + " d=" + std::to_string(d) +
                                             " n=" + std::to_string(n) + (portable ? " portable" : " auto");
                    const Data x = make_random_group(g, n, d, 11u * g + n);
                    const float scale = 1.0f / std::sqrt((float)d);
                    std::vector<float> s((size_t)g * n), w((size_t)g * n);
                    std::vector<PartialAttention> parts((size_t)g);
                    GroupFlashArgs a;
                    a.q = x.q.data();
                    a.g = g;
                    a.d = d;
                    a.scale = scale;
                    a.keys = x.k.data();
                    a.values = x.v.data();
                    a.n = n;
                    a.scores = s.data();
                    a.weights = w.data();
                    a.portable = portable;
                    GroupFlashScratch scratch;
                    group_flash_attention(a, parts, scratch);
                    for (int h = 0; h < g; ++h) {
                        std::vector<float> ref((size_t)d), wa, sc((size_t)n), out((size_t)d);
                        const float* qh = x.q.data() + (size_t)h * d;
                        attention_scores(qh, x.k.data(), n, d, scale, sc.data());
                        const double lse = exact_attention(qh, x.k.data(), x.v.data(), n, d, scale, ref.data(), wa);
                        for (int i = 0; i < n; ++i) {
                            ASSERT_NEAR(s[(size_t)h * n + i], sc[(size_t)i], 1e-5f * (1 + std::abs(sc[(size_t)i])))
                                << what;
                            ASSERT_NEAR(w[(size_t)h * n + i], wa[(size_t)i], 1e-6f + 1e-5f * wa[(size_t)i]) << what;
                        }
                        parts[(size_t)h].output(out.data());
                        EXPECT_LT(rel_l2(out.data(), ref.data(), d), 2e-5) << what << " h=" << h;
                        EXPECT_NEAR(parts[(size_t)h].lse(), lse, 2e-5 * (1 + std::abs(lse))) << what << " h=" << h;
                    }
                }
}

// group_partial_attention over shared (contiguous and scattered) and per-member lists, with and without
// log weights, equals partial_attention_ids for every member, for groups of 1, 4 and 8 and lists shorter
// than a block or not a multiple of it.
TEST(GroupFlash, SelectionsEqualPerHeadForGroupSizes) {
    for (int g : {1, 4, 8})
        for (int len : {50, 3 * kFlashBlock + 17}) {
            const int n = 2000, d = 64;
            const Data x = make_random_group(g, n, d, 100u + g);
            const float scale = 1.0f / std::sqrt((float)d);
            std::mt19937 rng(7u + g);
            std::normal_distribution<float> N(0, 1);
            std::vector<int32_t> all((size_t)n);
            std::iota(all.begin(), all.end(), 0);
            std::vector<int32_t> contiguous(all.begin() + 300, all.begin() + 300 + len);
            std::shuffle(all.begin(), all.end(), rng);
            const std::vector<int32_t> scattered(all.begin(), all.begin() + len);
            std::vector<std::vector<int32_t>> own((size_t)g);
            std::vector<std::vector<float>> lw((size_t)g), shared_lw((size_t)g);
            for (int h = 0; h < g; ++h) {
                std::shuffle(all.begin(), all.end(), rng);
                own[(size_t)h].assign(all.begin(), all.begin() + len + 13 * h);
                for (size_t j = 0; j < own[(size_t)h].size(); ++j) lw[(size_t)h].push_back(N(rng));
                for (int j = 0; j < len; ++j) shared_lw[(size_t)h].push_back(N(rng));
            }
            struct Case {
                std::string name;
                std::vector<std::span<const int32_t>> lists;
                std::vector<const float*> log_w;
            };
            std::vector<Case> cases;
            cases.push_back({"shared contiguous", std::vector<std::span<const int32_t>>((size_t)g, contiguous), {}});
            cases.push_back({"shared scattered", std::vector<std::span<const int32_t>>((size_t)g, scattered), {}});
            Case weighted_shared{"shared weighted", std::vector<std::span<const int32_t>>((size_t)g, scattered), {}};
            Case per{"per member", {}, {}}, per_w{"per member weighted", {}, {}};
            for (int h = 0; h < g; ++h) {
                weighted_shared.log_w.push_back(shared_lw[(size_t)h].data());
                per.lists.push_back(own[(size_t)h]);
                per_w.lists.push_back(own[(size_t)h]);
                per_w.log_w.push_back(lw[(size_t)h].data());
            }
            cases.push_back(weighted_shared);
            if (g > 1) {  // one list per member is a shared list when g = 1
                cases.push_back(per);
                cases.push_back(per_w);
            }
            GroupScratch scratch;
            for (const Case& c : cases) {
                const auto parts =
                    group_partial_attention(x.q.data(), g, x.k.data(), x.v.data(), d, scale, c.lists, c.log_w, scratch);
                ASSERT_EQ(parts.size(), (size_t)g);
                for (int h = 0; h < g; ++h) {
                    const PartialAttention ref =
                        partial_attention_ids(x.q.data() + (size_t)h * d, x.k.data(), x.v.data(), c.lists[(size_t)h], d,
                                              scale, c.log_w.empty() ? nullptr : c.log_w[(size_t)h]);
                    expect_partial_eq(parts[(size_t)h], ref, d,
                                      c.name + " g=" + std::to_string(g) + " len=" + std::to_string(len) +
                                          " member " + std::to_string(h));
                }
            }
        }
}

// Scores in the thousands (exp would overflow without the running max), with the maximum growing from
// block to block (every block rescales the running sums) or shrinking, and -inf log weights (a token left
// out; a member whose every token is left out is empty, not NaN).
TEST(GroupFlash, LargeAndMinusInfinityScoresStayFinite) {
    const int g = 4, d = 32, n = 5 * kFlashBlock + 9;
    for (bool ascending : {true, false})
        for (bool portable : portable_choices()) {
            // Integer q and k: every score is exact in float whatever the order of the sums, so the kernels
            // and the reference see the same scores (in the thousands) and differ only in their exp.
            Data x = make_random_group(g, n, d, 5);
            std::mt19937 rng(9);
            std::uniform_int_distribution<int> qi(-100, 100), ki(-3, 3);
            for (auto& e : x.q) e = (float)qi(rng);
            for (auto& e : x.k) e = (float)ki(rng);
            // order the keys by the first member's score so that its maximum grows (or not) every block
            std::vector<float> s0((size_t)n);
            attention_scores(x.q.data(), x.k.data(), n, d, 1.0f, s0.data());
            std::vector<int> order((size_t)n);
            std::iota(order.begin(), order.end(), 0);
            std::sort(order.begin(), order.end(),
                      [&](int a, int b) { return ascending ? s0[(size_t)a] < s0[(size_t)b] : s0[(size_t)a] > s0[(size_t)b]; });
            std::vector<float> k2(x.k.size()), v2(x.v.size());
            for (int i = 0; i < n; ++i) {
                std::copy_n(x.k.begin() + (size_t)order[(size_t)i] * d, d, k2.begin() + (size_t)i * d);
                std::copy_n(x.v.begin() + (size_t)order[(size_t)i] * d, d, v2.begin() + (size_t)i * d);
            }
            x.k = k2;
            x.v = v2;
            ASSERT_GT(std::abs(s0[(size_t)order[0]]), 1000.0f);

            std::vector<std::vector<float>> bias((size_t)g, std::vector<float>((size_t)n, 0.0f));
            for (int i = 0; i < n; i += 3) bias[1][(size_t)i] = -kInf;       // member 1: every third token out
            for (int i = 0; i < kFlashBlock; ++i) bias[2][(size_t)i] = -kInf;  // member 2: its first block out
            std::fill(bias[3].begin(), bias[3].end(), -kInf);                  // member 3: nothing
            std::vector<const float*> rows;
            for (auto& b : bias) rows.push_back(b.data());
            std::vector<float> w((size_t)g * n);
            std::vector<PartialAttention> parts((size_t)g);
            GroupFlashArgs a;
            a.q = x.q.data();
            a.g = g;
            a.d = d;
            a.scale = 1.0f;
            a.keys = x.k.data();
            a.values = x.v.data();
            a.n = n;
            a.bias = rows;
            a.weights = w.data();
            a.portable = portable;
            GroupFlashScratch scratch;
            group_flash_attention(a, parts, scratch);

            std::vector<int32_t> ids((size_t)n);
            std::iota(ids.begin(), ids.end(), 0);
            for (int h = 0; h < 3; ++h) {
                const std::string what = std::string(ascending ? "ascending" : "descending") +
                                          (portable ? " portable" : " auto") + " member " + std::to_string(h);
                const PartialAttention ref = partial_attention_ids(x.q.data() + (size_t)h * d, x.k.data(), x.v.data(),
                                                                   ids, d, 1.0f, bias[(size_t)h].data());
                ASSERT_TRUE(std::isfinite(parts[(size_t)h].lse())) << what;
                expect_partial_eq(parts[(size_t)h], ref, d, what);
                double sum = 0;
                for (int i = 0; i < n; ++i) {
                    const float wi = w[(size_t)h * n + i];
                    ASSERT_TRUE(std::isfinite(wi)) << what;
                    if (bias[(size_t)h][(size_t)i] == -kInf) {
                        ASSERT_EQ(wi, 0.0f) << what;
                    }
                    sum += wi;
                }
                EXPECT_NEAR(sum, 1.0, 1e-5) << what;
            }
            EXPECT_TRUE(parts[3].empty());
            EXPECT_EQ(parts[3].lse(), -std::numeric_limits<double>::infinity());
            for (int i = 0; i < n; ++i) ASSERT_EQ(w[(size_t)3 * n + i], 0.0f);
        }
}

// The polynomial exp of both kernel sets: <= 2 ulp-ish relative error (3e-7) against the double exp on
// [-87.3, 0], exactly 0 below (and for -inf), NaN stays NaN.
TEST(GroupFlash, FastExpErrorBound) {
    std::vector<const flash::Kernels*> sets{&flash::portable_kernels()};
    if (const flash::Kernels* k = flash::avx2_kernels()) sets.push_back(k);
    std::vector<float> xs;
    for (int i = 0; i <= 200000; ++i) xs.push_back(-87.3f * (float)i / 200000.0f);
    xs.push_back(-1e-30f);
    const size_t grid = xs.size();
    for (float x : {-87.4f, -100.0f, -1e30f, -kInf, std::numeric_limits<float>::quiet_NaN()}) xs.push_back(x);
    for (const flash::Kernels* k : sets) {
        std::vector<float> y = xs;
        k->exp(y.data(), (int)y.size());
        double worst = 0;
        for (size_t i = 0; i < grid; ++i) {
            const double e = std::exp((double)xs[i]);
            worst = std::max(worst, std::abs(y[i] - e) / e);
        }
        EXPECT_LT(worst, 3e-7) << k->name;
        for (size_t i = grid; i + 1 < xs.size(); ++i) EXPECT_EQ(y[i], 0.0f) << k->name << " x=" << xs[i];
        EXPECT_TRUE(std::isnan(y.back())) << k->name;
    }
}
