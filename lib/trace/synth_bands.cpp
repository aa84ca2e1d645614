#include "trace/synth_bands.hpp"

#include <algorithm>
#include <cmath>

namespace retro::synth_detail {

Bands make_bands(const SynthParams& p) {
    Bands b;
    b.P = p.head_dim / 2;
    b.freq.resize((size_t)b.P);
    for (int j = 0; j < b.P; ++j) b.freq[(size_t)j] = std::pow(p.rope_theta, -2.0 * j / p.head_dim);
    const int nz = std::max(2, b.P / 16);
    b.z_begin = b.P - nz;
    b.s_end = b.z_begin;
    int s0 = 0;
    while (s0 < b.P && b.freq[(size_t)s0] >= 1.0 / p.local_window) ++s0;
    b.s_begin = std::min(s0, b.P / 3);
    // Carrier of the recency component: frequencies in [1/(f W), kCarrierMaxFreq], f = recency_span_factor (lower
    // frequencies give the kernel a longer tail; kCarrierMaxFreq is slow enough that its far-field
    // RoPE ripple changes little from one decode step to the next), at least 4 pairs, above the Z band.
    int c0 = 0, c1 = 0;
    while (c0 < b.P && b.freq[(size_t)c0] > kCarrierMaxFreq) ++c0;
    c1 = c0;
    while (c1 < b.z_begin && b.freq[(size_t)c1] >= 1.0 / (p.recency_span_factor * p.local_window)) ++c1;
    while (c1 - c0 < 4 && c0 > 0) --c0;
    while (c1 - c0 < 4 && c1 < b.z_begin) ++c1;
    b.c_begin = c0;
    b.c_end = c1;
    // Needle pairs: semantic pairs that rotate by at most 1 radian over the whole trace (coherent at any
    // distance); at least a quarter of the semantic band (and 2 pairs).
    const int min_needle = std::max(2, b.s_pairs() / 4);
    int nb = b.s_end;
    while (nb > b.s_begin && b.freq[(size_t)(nb - 1)] * p.n_tokens() <= 1.0) --nb;
    b.n_begin = std::min(nb, b.s_end - min_needle);
    b.n_begin = std::max(b.n_begin, b.s_begin);
    int lb = b.P;
    while (lb > 0 && b.freq[(size_t)(lb - 1)] * p.n_tokens() <= 1.0) --lb;
    b.l_begin = std::min(lb, b.z_begin);
    return b;
}

RopeTable::RopeTable(const Bands& b, int n) : P(b.P), c((size_t)n * b.P), s((size_t)n * b.P) {
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < P; ++j) {
            const double a = (double)i * b.freq[(size_t)j];
            c[(size_t)i * P + j] = (float)std::cos(a);
            s[(size_t)i * P + j] = (float)std::sin(a);
        }
}

}  // namespace retro::synth_detail
