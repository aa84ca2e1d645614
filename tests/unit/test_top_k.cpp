// core/top_k: both selection paths (heap for k <= n/16, threshold otherwise) against a full sort by
// (value desc, index asc), on values with many ties, at every k from 0 past n; one scratch reused.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "core/top_k.hpp"

using namespace retro;

namespace {
std::vector<int32_t> reference(const std::vector<float>& v, int k) {
    std::vector<int32_t> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return v[(size_t)a] > v[(size_t)b]; });
    idx.resize((size_t)std::clamp(k, 0, (int)v.size()));
    return idx;
}
}  // namespace

TEST(TopK, BothPathsEqualAFullSortWithTiesByLowerIndex) {
    std::mt19937 rng(3);
    TopKScratch s;
    std::vector<int32_t> out;
    for (int n : {1, 7, 64, 333}) {
        for (int levels : {3, 1000}) {  // 3 levels: ties everywhere, the threshold value repeated
            std::uniform_int_distribution<int> u(0, levels - 1);
            std::vector<float> v((size_t)n);
            for (auto& x : v) x = (float)u(rng) - 0.5f * (float)levels;  // negatives too
            for (int k = 0; k <= n + 2; ++k) {
                top_k_into(v.data(), n, k, out, s);
                ASSERT_EQ(out, reference(v, k)) << "n " << n << " levels " << levels << " k " << k;
            }
            EXPECT_EQ(top_k_indices(v.data(), n, n / 16 + 1), reference(v, n / 16 + 1));
        }
    }
    top_k_into(nullptr, 0, 5, out, s);
    EXPECT_TRUE(out.empty());
    const float v[] = {1.0f, 2.0f};
    top_k_into(v, 2, -1, out, s);
    EXPECT_TRUE(out.empty());
}
