#pragma once
// random_dense_weights (dense_api.hpp), shared by the kernel's and the emulation's DenseLayer: normal
// entries scaled by 1/sqrt(fan-in) (activations stay O(1) through the layer), RMSNorm weights near 1.
#include <cmath>
#include <random>

#include "core/half.hpp"
#include "dense/dense_api.hpp"

namespace retro::cuda {

inline DenseWeights random_dense_weights(const DenseShape& s, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    const auto fill = [&](size_t rows, size_t cols) {
        std::vector<uint16_t> w(rows * cols);
        const float scale = 1.0f / std::sqrt((float)rows);
        for (auto& x : w) x = float_to_half(nd(rng) * scale);
        return w;
    };
    DenseWeights w;
    w.wqkv = fill((size_t)s.hidden, (size_t)s.qkv());
    w.wo = fill((size_t)s.attn(), (size_t)s.hidden);
    w.wgu = fill((size_t)s.hidden, 2 * (size_t)s.ffn);
    w.wdown = fill((size_t)s.ffn, (size_t)s.hidden);
    for (auto* n : {&w.norm1, &w.norm2}) {
        n->resize((size_t)s.hidden);
        for (auto& x : *n) x = float_to_half(1.0f + 0.1f * nd(rng));
    }
    return w;
}

}  // namespace retro::cuda
