#pragma once
// Internal to lib/trace/synth*.cpp: the RoPE frequency bands the generator puts each component in
// (docs/synth.md, "Frequency bands") and the RoPE rotation table.
#include <vector>

#include "trace/synth.hpp"

namespace retro::synth_detail {

constexpr double kCarrierMaxFreq = 0.125;  ///< highest RoPE frequency (rad/token) of the recency carrier

/// Frequency bands of the RoPE pairs (pair j = dims j and j + head_dim/2, frequency theta^(-2j/d)).
struct Bands {
    int P = 0;                   ///< pairs
    int c_begin = 0, c_end = 0;  ///< recency carrier: pairs with 1/(recency_span_factor local_window) <= freq <= kCarrierMaxFreq
    int s_begin = 0, s_end = 0;  ///< semantic band: pairs with freq < 1/local_window, below the Z band
    int z_begin = 0;             ///< sink / query-offset band: the lowest-frequency pairs [z_begin, P)
    int n_begin = 0;             ///< needle pairs: [n_begin, s_end) (the lowest-frequency semantic pairs)
    int l_begin = 0;             ///< low band: [l_begin, P), pairs turning <= 1 rad over the trace (and Z)
    std::vector<double> freq;    ///< [P]
    int s_pairs() const { return s_end - s_begin; }
};

/// The bands of `p` (does not validate `p`; SynthParams::validate() checks the semantic band's width).
Bands make_bands(const SynthParams& p);

/// cos/sin of position * freq[j] for positions [0, n): [n, P] each.
struct RopeTable {
    int P = 0;
    std::vector<float> c, s;
    RopeTable(const Bands& b, int n);
    /// Rotates x [2P] (half_split layout) to position pos, in place.
    void rotate(float* x, int pos) const {
        const float* cc = c.data() + (size_t)pos * P;
        const float* ss = s.data() + (size_t)pos * P;
        for (int j = 0; j < P; ++j) {
            const float a = x[j], b = x[j + P];
            x[j] = a * cc[j] - b * ss[j];
            x[j + P] = b * cc[j] + a * ss[j];
        }
    }
};

}  // namespace retro::synth_detail
