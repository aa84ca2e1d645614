#pragma once
// Random GQA groups and the relative error the group attention tests (test_group_attention.cpp,
// test_group_flash.cpp) compare outputs with.
#include <cmath>
#include <random>
#include <vector>

namespace retro::test {

struct RandomGroup {
    int g, n, d;
    std::vector<float> q, k, v;  // [g, d], [n, d], [n, d]
};

/// Normal keys and values; queries scaled by q_scale (2: a peaked softmax whose large weights must
/// survive float32).
inline RandomGroup make_random_group(int g, int n, int d, unsigned seed, float q_scale = 2.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> N(0, 1);
    RandomGroup x{g, n, d, std::vector<float>((size_t)g * d), std::vector<float>((size_t)n * d),
                  std::vector<float>((size_t)n * d)};
    for (auto& e : x.q) e = q_scale * N(rng);
    for (auto& e : x.k) e = N(rng);
    for (auto& e : x.v) e = N(rng);
    return x;
}

/// ||a - b|| / ||b|| over [d].
inline double rel_l2(const float* a, const float* b, int d) {
    double num = 0, den = 0;
    for (int i = 0; i < d; ++i) {
        num += (a[i] - b[i]) * (double)(a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return std::sqrt(num / den);
}

}  // namespace retro::test
