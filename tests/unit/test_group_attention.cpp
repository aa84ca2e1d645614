// The GQA-aware path (lib/attention/group_attention, issue 17) against the per-head path of
// attention.hpp: full attention, scores, and attention over selections (shared, per query head,
// contiguous or scattered, weighted), to float tolerance; and the evaluator's metrics through it.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "attention/attention.hpp"
#include "attention/group_attention.hpp"
#include "metrics/evaluator.hpp"
#include "group_test_data.hpp"

using namespace retro;

namespace {
constexpr int kG = 4, kD = 64;

using Group = test::RandomGroup;
Group make_group(int n, unsigned seed) { return test::make_random_group(kG, n, kD, seed); }
using test::rel_l2;
const float kScale = 1.0f / std::sqrt((float)kD);
}  // namespace

TEST(GroupAttention, FullAttentionEqualsPerHead) {
    const Group x = make_group(3001, 1);
    std::vector<float> s((size_t)kG * x.n), s_gemm((size_t)kG * x.n), w((size_t)kG * x.n);
    group_attention_scores(x.q.data(), kG, x.k.data(), x.n, kD, kScale, s_gemm.data());
    std::vector<float> out((size_t)kG * kD);
    std::vector<double> lse(kG);
    GroupFlashScratch scratch;
    group_exact_attention(x.q.data(), kG, x.k.data(), x.v.data(), x.n, kD, kScale, s.data(), w.data(), out.data(),
                          lse.data(), scratch);
    for (int h = 0; h < kG; ++h) {
        std::vector<float> ref(kD), a, sc((size_t)x.n);
        attention_scores(x.q.data() + (size_t)h * kD, x.k.data(), x.n, kD, kScale, sc.data());
        for (int i = 0; i < x.n; ++i) {
            const float tol = 1e-5f * (1 + std::abs(sc[(size_t)i]));
            ASSERT_NEAR(s[(size_t)h * x.n + i], sc[(size_t)i], tol);
            ASSERT_NEAR(s_gemm[(size_t)h * x.n + i], sc[(size_t)i], tol);
        }
        const double l = exact_attention(x.q.data() + (size_t)h * kD, x.k.data(), x.v.data(), x.n, kD, kScale,
                                         ref.data(), a);
        EXPECT_NEAR(lse[(size_t)h], l, 1e-5 * (1 + std::abs(l))) << h;
        EXPECT_LT(rel_l2(out.data() + (size_t)h * kD, ref.data(), kD), 1e-5) << h;
        for (int i = 0; i < x.n; ++i) ASSERT_NEAR(w[(size_t)h * x.n + i], a[(size_t)i], 1e-6f);
    }
}

// Shared lists (contiguous: read in place; scattered: gathered), per-head lists (union + mask, with an
// empty member), log weights: every member's output and lse equal partial_attention_ids.
TEST(GroupAttention, SelectionsSharedAndPerHeadEqualPerHeadPath) {
    const Group x = make_group(2000, 2);
    std::mt19937 rng(5);
    std::vector<int32_t> contiguous(700);
    std::iota(contiguous.begin(), contiguous.end(), 900);
    std::vector<int32_t> all((size_t)x.n);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    const std::vector<int32_t> scattered(all.begin(), all.begin() + 300);
    std::vector<std::vector<int32_t>> own(kG);
    for (int h = 0; h < kG - 1; ++h) {  // overlapping per-head lists; the last member's list is empty
        std::shuffle(all.begin(), all.end(), rng);
        own[(size_t)h].assign(all.begin(), all.begin() + 150 + 40 * h);
    }
    std::vector<std::vector<float>> lw(kG);
    std::normal_distribution<float> N(0, 1);
    for (int h = 0; h < kG; ++h)
        for (size_t j = 0; j < own[(size_t)h].size(); ++j) lw[(size_t)h].push_back(N(rng));

    struct Case {
        const char* name;
        std::vector<std::span<const int32_t>> lists;
        std::vector<const float*> log_w;
    };
    std::vector<Case> cases;
    cases.push_back({"shared contiguous", std::vector<std::span<const int32_t>>(kG, contiguous), {}});
    cases.push_back({"shared scattered", std::vector<std::span<const int32_t>>(kG, scattered), {}});
    Case per{"per head", {}, {}}, weighted{"per head weighted", {}, {}};
    for (int h = 0; h < kG; ++h) {
        per.lists.push_back(own[(size_t)h]);
        weighted.lists.push_back(own[(size_t)h]);
        weighted.log_w.push_back(lw[(size_t)h].data());
    }
    cases.push_back(per);
    cases.push_back(weighted);

    GroupScratch scratch;
    for (const Case& c : cases) {
        const auto parts = group_partial_attention(x.q.data(), kG, x.k.data(), x.v.data(), kD, kScale, c.lists,
                                                   c.log_w, scratch);
        ASSERT_EQ(parts.size(), (size_t)kG);
        for (int h = 0; h < kG; ++h) {
            const PartialAttention ref = partial_attention_ids(x.q.data() + (size_t)h * kD, x.k.data(), x.v.data(),
                                                               c.lists[(size_t)h], kD, kScale,
                                                               c.log_w.empty() ? nullptr : c.log_w[(size_t)h]);
            ASSERT_EQ(parts[(size_t)h].empty(), ref.empty()) << c.name << " member " << h;
            if (ref.empty()) continue;
            std::vector<float> a(kD), b(kD);
            parts[(size_t)h].output(a.data());
            ref.output(b.data());
            EXPECT_LT(rel_l2(a.data(), b.data(), kD), 1e-5) << c.name << " member " << h;
            EXPECT_NEAR(parts[(size_t)h].lse(), ref.lse(), 1e-5 * (1 + std::abs(ref.lse()))) << c.name << " member " << h;
        }
    }
}

// The evaluator through the group path: a full selection has zero error for every member, and a
// per-head selection scores each member against its own list (as the per-head path did).
TEST(GroupAttention, EvaluatorMetricsMatchPerHeadReference) {
    const Group x = make_group(1500, 3);
    HeadSlice h;
    h.head_dim = kD;
    h.group = kG;
    h.prompt_len = x.n - 1;
    h.num_steps = 1;
    h.keys = x.k;
    h.values = x.v;
    h.queries = x.q;  // [steps = 1][kG][kD]
    Evaluator ev(h, {10});
    ev.prepare_step(0);
    ASSERT_EQ(ev.visible(), x.n);
    Selection full;
    full.shared().resize((size_t)x.n);
    std::iota(full.shared().begin(), full.shared().end(), 0);
    std::vector<QueryMetrics> m;
    ev.evaluate(full, "full", m);
    for (int g = 0; g < kG; ++g) {
        EXPECT_LT(m[(size_t)g].out_err, 1e-5);
        EXPECT_NEAR(m[(size_t)g].mass, 1.0, 1e-5);
        EXPECT_DOUBLE_EQ(m[(size_t)g].recall[0], 1.0);
        std::vector<float> ref(kD), a;
        const double lse = exact_attention(x.q.data() + (size_t)g * kD, x.k.data(), x.v.data(), x.n, kD, kScale,
                                           ref.data(), a);
        EXPECT_NEAR(ev.reference(g).lse, lse, 1e-5 * (1 + std::abs(lse)));
        EXPECT_LT(rel_l2(ev.reference(g).out.data(), ref.data(), kD), 1e-5);
    }
    Selection per;
    per.exact.resize(kG);
    for (int g = 0; g < kG; ++g)
        for (int i = g; i < x.n; i += 3 + g) per.exact[(size_t)g].push_back(i);
    ev.evaluate(per, "per", m);
    for (int g = 0; g < kG; ++g) {
        const PartialAttention p = partial_attention_ids(x.q.data() + (size_t)g * kD, x.k.data(), x.v.data(),
                                                         per.exact[(size_t)g], kD, kScale);
        std::vector<float> o(kD);
        p.output(o.data());
        EXPECT_NEAR(m[(size_t)g].out_err, rel_l2(o.data(), ev.reference(g).out.data(), kD), 1e-5);
        EXPECT_NEAR(m[(size_t)g].lse_err, std::abs(p.lse() - ev.reference(g).lse), 1e-5);
        EXPECT_NEAR(m[(size_t)g].exact_frac, (double)per.exact[(size_t)g].size() / x.n, 1e-12);
    }
}
