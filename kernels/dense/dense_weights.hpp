#pragma once
// random_dense_weights (dense_api.hpp), shared by the kernel's and the emulation's DenseLayer: entries of unit
// variance scaled by 1/sqrt(fan-in) (activations stay O(1) through the layer), RMSNorm weights near 1. Only
// the shapes matter for the time, so the entries are uniform (of variance 1) from a counter-based hash: entry
// i of matrix m depends on (seed, m, i) alone, so the matrices fill on every core with the same values
// whatever the thread count. Llama-3-8B's 218M weights took 7.8 s from std::normal_distribution on one core of
// the 2-core VM, 1.7 s so (bench_dense_weights), in each process that times the dense layer (a lease's wave runs).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/half.hpp"
#include "core/threads.hpp"
#include "dense/dense_api.hpp"

namespace retro::cuda {

/// A uniform draw in (-1, 1) from `key` (splitmix64's finalizer, its top 24 bits).
inline float dense_uniform(uint64_t key) {
    key += 0x9E3779B97F4A7C15ull;
    key = (key ^ (key >> 30)) * 0xBF58476D1CE4E5B9ull;
    key = (key ^ (key >> 27)) * 0x94D049BB133111EBull;
    key ^= key >> 31;
    return ((float)(key >> 40) + 0.5f) * (2.0f / 16777216.0f) - 1.0f;
}

inline DenseWeights random_dense_weights(const DenseShape& s, unsigned seed) {
    const float unit = std::sqrt(3.0f);  // uniform (-1, 1) times sqrt(3): variance 1
    const auto key = [&](int m, size_t i) { return ((uint64_t)seed << 36) + ((uint64_t)m << 32) + (uint64_t)i; };
    const auto fill = [&](int m, size_t rows, size_t cols) {
        std::vector<uint16_t> w(rows * cols);
        const float scale = unit / std::sqrt((float)rows);
        const size_t chunk = (size_t)1 << 20;
        for_each_item((int)((w.size() + chunk - 1) / chunk), compute_threads(), [&](int c) {
            const size_t end = std::min(w.size(), (size_t)(c + 1) * chunk);
            for (size_t i = (size_t)c * chunk; i < end; ++i) w[i] = float_to_half(dense_uniform(key(m, i)) * scale);
        });
        return w;
    };
    DenseWeights w;
    w.wqkv = fill(0, (size_t)s.hidden, (size_t)s.qkv());
    w.wo = fill(1, (size_t)s.attn(), (size_t)s.hidden);
    w.wgu = fill(2, (size_t)s.hidden, 2 * (size_t)s.ffn);
    w.wdown = fill(3, (size_t)s.ffn, (size_t)s.hidden);
    int m = 4;
    for (auto* n : {&w.norm1, &w.norm2}) {
        n->resize((size_t)s.hidden);
        for (size_t i = 0; i < n->size(); ++i) (*n)[i] = float_to_half(1.0f + 0.1f * unit * dense_uniform(key(m, i)));
        ++m;
    }
    return w;
}

}  // namespace retro::cuda
