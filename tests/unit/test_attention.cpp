// LSE merge and estimated-cluster attention: the shared partial-softmax machinery.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "attention/attention.hpp"

using namespace retro;

namespace {
struct Data {
    int n, d;
    std::vector<float> q, k, v;
};
Data make_data(int n, int d, unsigned seed, float key_scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> N(0, 1);
    Data x{n, d, std::vector<float>(d), std::vector<float>((size_t)n * d), std::vector<float>((size_t)n * d)};
    for (auto& e : x.q) e = N(rng);
    for (auto& e : x.k) e = key_scale * N(rng);
    for (auto& e : x.v) e = N(rng);
    return x;
}
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (a[i] - b[i]) * (double)(a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return std::sqrt(num / den);
}
}  // namespace

TEST(Attention, SoftmaxSumsToOneAndLseMatches) {
    std::vector<float> s = {1000.f, 999.f, -5.f, 0.f};  // large scores: must not overflow
    std::vector<float> copy = s;
    double lse = softmax_inplace(s.data(), 4);
    double sum = 0;
    for (float x : s) sum += x;
    EXPECT_NEAR(sum, 1.0, 1e-6);
    double ref = 1000.0 + std::log(1.0 + std::exp(-1.0) + std::exp(-1005.0) + std::exp(-1000.0));
    EXPECT_NEAR(lse, ref, 1e-6);  // exp() in float32
    EXPECT_GT(s[0], s[1]);
}

TEST(Attention, MergeOfDisjointPartialsEqualsOneSoftmaxOverUnion) {
    for (int n : {1, 2, 7, 64, 1000, 4097}) {
        for (int d : {8, 64, 128}) {
            Data x = make_data(n, d, 1234u + n * 7 + d, 3.0f);
            const float scale = 1.0f / std::sqrt((float)d);
            std::vector<float> ref(d), got(d), a;
            double lse_ref = exact_attention(x.q.data(), x.k.data(), x.v.data(), n, d, scale, ref.data(), a);
            // random split into 3 disjoint parts, in shuffled order
            std::vector<int32_t> ids(n);
            std::iota(ids.begin(), ids.end(), 0);
            std::mt19937 rng(n + d);
            std::shuffle(ids.begin(), ids.end(), rng);
            size_t c1 = n / 3, c2 = 2 * n / 3;
            auto p1 = partial_attention_ids(x.q.data(), x.k.data(), x.v.data(), {ids.data(), c1}, d, scale);
            auto p2 = partial_attention_ids(x.q.data(), x.k.data(), x.v.data(), {ids.data() + c1, c2 - c1}, d, scale);
            auto p3 = partial_attention_ids(x.q.data(), x.k.data(), x.v.data(), {ids.data() + c2, n - c2}, d, scale);
            PartialAttention acc(d);
            merge(acc, p2);
            merge(acc, p1);
            merge(acc, p3);
            acc.output(got.data());
            EXPECT_LT(rel_err(got, ref), 1e-5) << "n=" << n << " d=" << d;
            EXPECT_NEAR(acc.lse(), lse_ref, 1e-4 * std::max(1.0, std::abs(lse_ref)));
            // token-by-token accumulation agrees too
            PartialAttention inc(d);
            for (int i = n - 1; i >= 0; --i) add_token(inc, scale * std::inner_product(x.q.begin(), x.q.end(), x.k.begin() + (size_t)i * d, 0.0f), x.v.data() + (size_t)i * d, d);
            inc.output(got.data());
            EXPECT_LT(rel_err(got, ref), 1e-5);
        }
    }
}

TEST(Attention, EstimatedClustersOfSizeOneEqualExactAttention) {
    const int n = 300, d = 64;
    Data x = make_data(n, d, 99);
    const float scale = 1.0f / std::sqrt((float)d);
    std::vector<float> ref(d), got(d), a;
    double lse_ref = exact_attention(x.q.data(), x.k.data(), x.v.data(), n, d, scale, ref.data(), a);
    PartialAttention p(d);
    for (int i = 0; i < n; ++i) {
        float s = 0;
        for (int j = 0; j < d; ++j) s += x.q[j] * x.k[(size_t)i * d + j];
        add_estimated_cluster(p, scale * s, 1.0, x.v.data() + (size_t)i * d, d);
    }
    p.output(got.data());
    EXPECT_LT(rel_err(got, ref), 1e-5);
    EXPECT_NEAR(p.lse(), lse_ref, 1e-4);
}

TEST(Attention, EstimatedClusterOfIdenticalKeysIsExact) {
    // n_j identical keys: the cluster estimate (size n_j, centroid = key, value sum) is exact.
    const int d = 16, nj = 5;
    Data x = make_data(nj, d, 5);
    for (int i = 1; i < nj; ++i)
        std::copy(x.k.begin(), x.k.begin() + d, x.k.begin() + (size_t)i * d);
    const float scale = 0.25f;
    std::vector<float> ref(d), got(d), a;
    double lse_ref = exact_attention(x.q.data(), x.k.data(), x.v.data(), nj, d, scale, ref.data(), a);
    std::vector<float> vs(d, 0.0f);
    for (int i = 0; i < nj; ++i)
        for (int j = 0; j < d; ++j) vs[j] += x.v[(size_t)i * d + j];
    float s = 0;
    for (int j = 0; j < d; ++j) s += x.q[j] * x.k[j];
    PartialAttention p(d);
    add_estimated_cluster(p, scale * s, nj, vs.data(), d);
    p.output(got.data());
    EXPECT_LT(rel_err(got, ref), 1e-5);
    EXPECT_NEAR(p.lse(), lse_ref, 1e-5);
}

TEST(Attention, EmptyPartialIsIdentityForMerge) {
    const int d = 8;
    Data x = make_data(10, d, 3);
    std::vector<int32_t> ids = {1, 4, 7};
    auto p = partial_attention_ids(x.q.data(), x.k.data(), x.v.data(), ids, d, 0.5f);
    PartialAttention e(d);
    EXPECT_TRUE(e.empty());
    EXPECT_TRUE(std::isinf(e.lse()));
    PartialAttention m = e;
    merge(m, p);
    merge(m, PartialAttention(d));
    EXPECT_DOUBLE_EQ(m.lse(), p.lse());
}
