#pragma once
// Internal to lib/trace/synth*.cpp: the generator's random streams. Every random quantity of a synthetic
// trace comes from its own stream keyed by (seed, purpose tag, layer, head, token), so the arrays do not
// depend on the order of generation or the thread count, and one layer can be generated alone.
#include <cmath>
#include <cstdint>

namespace retro::synth_detail {

inline uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/// Purpose of a stream (the values are part of the trace format's reproducibility: never reorder).
enum Tag : uint64_t {
    kText = 1, kNeedlePos, kHeadParam, kKeyMean, kSinkDir, kTopicKey, kNeedleKey, kKeyTok, kValMean,
    kTopicVal, kNeedleVal, kValTok, kFocusGroup, kFocusHead, kNeedleSched, kQueryOffset, kQueryNoise,
    kWord, kWordKey, kMeanJitter,
};

/// Independent stream keyed by (seed, tag, a, b, c): splitmix64 + Marsaglia polar normals.
struct Rng {
    uint64_t s;
    double spare = 0;
    bool has_spare = false;
    Rng(uint64_t seed, uint64_t tag, uint64_t a = 0, uint64_t b = 0, uint64_t c = 0) {
        uint64_t h = mix64(seed ^ 0x5851f42d4c957f2dull);
        h = mix64(h ^ tag);
        h = mix64(h ^ (a + 0x632be59bd9b4e019ull));
        h = mix64(h ^ (b + 0x8cb92ba72f3d8dd7ull));
        s = mix64(h ^ (c + 0x2545f4914f6cdd1dull));
    }
    uint64_t next() {
        s += 0x9e3779b97f4a7c15ull;
        uint64_t z = s;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform() { return (double)(next() >> 11) * 0x1.0p-53; }  ///< [0, 1)
    double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
    int below(int n) { return (int)(uniform() * n); }
    double normal() {
        if (has_spare) {
            has_spare = false;
            return spare;
        }
        double u, v, r;
        do {
            u = 2.0 * uniform() - 1.0;
            v = 2.0 * uniform() - 1.0;
            r = u * u + v * v;
        } while (r >= 1.0 || r == 0.0);
        const double f = std::sqrt(-2.0 * std::log(r) / r);
        spare = v * f;
        has_spare = true;
        return u * f;
    }
};

/// Fills the dims of pairs [p0, p1) of x [2P] (both halves) with normal(0, sd) draws.
inline void fill_pairs(Rng& r, float* x, int P, int p0, int p1, double sd) {
    for (int j = p0; j < p1; ++j) {
        x[j] = (float)(sd * r.normal());
        x[j + P] = (float)(sd * r.normal());
    }
}

}  // namespace retro::synth_detail
