#include "attention/cluster_rank.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace retro {

void group_cluster_weights(const float* scores, int g, int m, std::span<const int> valid, GroupRank mode,
                           std::vector<float>& agg, std::vector<float>& w) {
    agg.assign((size_t)m, mode == GroupRank::max ? -std::numeric_limits<float>::infinity() : 0.0f);
    for (int h = 0; h < g; ++h) {
        const float* s = scores + (size_t)h * m;
        if (mode == GroupRank::mean) {
            for (int j : valid) agg[(size_t)j] += s[j] / (float)g;
            continue;
        }
        // softmax over the valid (non-empty) clusters only: empty ones are masked, as the public code
        float mx = -std::numeric_limits<float>::infinity();
        for (int j : valid) mx = std::max(mx, s[j]);
        w.resize((size_t)m);
        double sum = 0;
        for (int j : valid) sum += (w[(size_t)j] = std::exp(s[j] - mx));
        const float inv = (float)(1.0 / sum);
        for (int j : valid) {
            const float wj = w[(size_t)j] * inv;
            float& a = agg[(size_t)j];
            a = mode == GroupRank::sum ? a + wj : std::max(a, wj);
        }
    }
}

std::vector<int> rank_clusters(const std::vector<float>& agg, std::span<const int> valid) {
    std::vector<int> order(valid.begin(), valid.end());
    std::sort(order.begin(), order.end(), [&](int a, int b) {
        return agg[(size_t)a] > agg[(size_t)b] || (agg[(size_t)a] == agg[(size_t)b] && a < b);
    });
    return order;
}

}  // namespace retro
