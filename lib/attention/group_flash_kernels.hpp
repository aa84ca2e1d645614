#pragma once
// The three inner loops of the fused group attention (group_flash.cpp) for one block of b tokens, in a
// portable version (plain loops the compiler vectorizes for the baseline ISA) and an AVX2 + FMA version
// (group_flash_avx2.cpp) picked at run time when the CPU has both. Internal to lib/attention.
//
// Layout: the block's scores and weights are head-major [gp, bs] (row h at h * bs, bs = block
// capacity), gp = g rounded up to a multiple of 4 (the AVX2 kernels work on 4 heads at once; padded
// rows have zero queries and zero weights). Rows of K and V are given as pointers (krow/vrow: [b]) so
// that a contiguous range and a gathered id list take the same path without copying a row.
#include <cstdint>
#include <cstring>

namespace retro::flash {

/// s: [gp, bs]: s[h * bs + i] = scale * dot(q[h], krow[i]) for h < gp, i < b. q: [gp, d].
/// pf: [b] rows to prefetch (the next block's key rows, spread over this block's work) or nullptr.
using ScoreFn = void (*)(const float* q, int gp, const float* const* krow, int b, int d, float scale, float* s,
                         int bs, const float* const* pf);
/// x: [count] <- exp(x) (fast_exp below; x <= 0 here, -inf gives 0).
using ExpFn = void (*)(float* x, int count);
/// acc: [gp, d] += sum_i e[h * bs + i] * vrow[i] for h < gp, i < b. pf: as for ScoreFn (value rows).
using AccumulateFn = void (*)(const float* e, int gp, const float* const* vrow, int b, int d, float* acc, int bs,
                              const float* const* pf);

struct Kernels {
    ScoreFn score;
    ExpFn exp;
    AccumulateFn accumulate;
    const char* name;  ///< "avx2" or "portable"
};

/// The kernels for this CPU: AVX2 + FMA when the CPU has them and d % 16 == 0, else portable.
const Kernels& kernels_for(int d);
const Kernels& portable_kernels();
/// nullptr where the AVX2 kernels are not compiled in (not x86-64 GCC/clang) or the CPU lacks AVX2/FMA.
const Kernels* avx2_kernels();

// exp(x) for x <= 0 (the argument of a softmax after subtracting the running max): Cephes' expf
// (range reduction x = n ln2 + r, |r| <= ln2 / 2, ln2 split in two for an exact n ln2, a degree-6
// polynomial for e^r, then the exponent bits of 2^n). Relative error against the double exp, measured
// on a 2M-point grid of [-87.3, 0]: at most 8.3e-8 (portable and AVX2 alike; GroupFlash.FastExpErrorBound
// asserts < 3e-7); x < -87.3 (e^x below FLT_MIN, including -inf) gives 0 instead of a denormal.
// Branch-free so the portable loop vectorizes.
constexpr float kExpLo = -87.3f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;      // exact in 9 bits: n * kLn2Hi is exact for |n| < 2^15
constexpr float kLn2Lo = -2.12194440e-4f;   // ln2 - kLn2Hi
constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: (x + magic) - magic rounds x to an integer
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f, kP3 = 4.1665795894e-2f,
                kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

inline float fast_exp(float x) {
    const bool zero = !(x >= kExpLo);  // true for NaN too: handled at the end
    const float xc = zero ? kExpLo : x;
    const float n = (xc * kLog2e + kRoundMagic) - kRoundMagic;
    const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
    float p = kP0;
    p = p * r + kP1;
    p = p * r + kP2;
    p = p * r + kP3;
    p = p * r + kP4;
    p = p * r + kP5;
    const float er = (p * r) * r + r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23;
    float two_n;
    std::memcpy(&two_n, &bits, sizeof two_n);
    const float y = er * two_n;
    return x != x ? x : (zero ? 0.0f : y);  // NaN stays NaN (garbage in K must show, as with std::exp)
}

}  // namespace retro::flash
