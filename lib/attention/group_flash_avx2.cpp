// AVX2 + FMA versions of the fused group attention's block kernels (group_flash_kernels.hpp). Compiled
// with per-function target attributes, not file-wide flags, so the binary still runs on the baseline ISA
// (CMakeLists.txt: no -march=native); group_flash.cpp calls them only after checking the CPU at run time.
// FMA rounds once where the portable loops round twice, so results may differ from the portable path
// (and between CPUs with and without AVX2) in the last bits, as OpenBLAS's kernels already do.
#include "attention/group_flash_kernels.hpp"

#include <algorithm>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RETRO_FLASH_AVX2 1
#include <immintrin.h>
#endif

namespace retro::flash {

#ifdef RETRO_FLASH_AVX2
namespace {

#define RETRO_AVX2 __attribute__((target("avx2,fma")))

// [sum(a0), sum(a1), sum(a2), sum(a3)]
RETRO_AVX2 inline __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

inline void store4(float* s, int bs, int i, __m128 r) {
    alignas(16) float t[4];
    _mm_store_ps(t, r);
    s[i] = t[0];
    s[bs + i] = t[1];
    s[2 * bs + i] = t[2];
    s[3 * bs + i] = t[3];
}

// Four heads x three keys per sweep over d (12 accumulators): each key row is loaded once per 4 heads,
// each query chunk once per 3 keys (7 loads per 12 FMAs; 1.5x faster than 2 keys in L2). d % 8 == 0.
RETRO_AVX2 void score_avx2(const float* q, int gp, const float* const* krow, int b, int d, float scale, float* s,
                           int bs, const float* const* pf) {
    const __m128 sc = _mm_set1_ps(scale);
    for (int h0 = 0; h0 < gp; h0 += 4) {
        const float *q0 = q + (size_t)h0 * d, *q1 = q0 + d, *q2 = q1 + d, *q3 = q2 + d;
        float* sh = s + (size_t)h0 * bs;
        int i = 0;
        for (; i + 3 <= b; i += 3) {
            const float *k0 = krow[i], *k1 = krow[i + 1], *k2 = krow[i + 2];
            if (pf && h0 == 0)
                for (int r = 0; r < 3; ++r)
                    for (int c = 0; c < d; c += 16) _mm_prefetch((const char*)(pf[i + r] + c), _MM_HINT_T0);
            __m256 a00 = _mm256_setzero_ps(), a10 = a00, a20 = a00, a30 = a00;
            __m256 a01 = a00, a11 = a00, a21 = a00, a31 = a00;
            __m256 a02 = a00, a12 = a00, a22 = a00, a32 = a00;
            for (int c = 0; c < d; c += 8) {
                const __m256 x0 = _mm256_loadu_ps(k0 + c), x1 = _mm256_loadu_ps(k1 + c), x2 = _mm256_loadu_ps(k2 + c);
                __m256 w = _mm256_loadu_ps(q0 + c);
                a00 = _mm256_fmadd_ps(w, x0, a00);
                a01 = _mm256_fmadd_ps(w, x1, a01);
                a02 = _mm256_fmadd_ps(w, x2, a02);
                w = _mm256_loadu_ps(q1 + c);
                a10 = _mm256_fmadd_ps(w, x0, a10);
                a11 = _mm256_fmadd_ps(w, x1, a11);
                a12 = _mm256_fmadd_ps(w, x2, a12);
                w = _mm256_loadu_ps(q2 + c);
                a20 = _mm256_fmadd_ps(w, x0, a20);
                a21 = _mm256_fmadd_ps(w, x1, a21);
                a22 = _mm256_fmadd_ps(w, x2, a22);
                w = _mm256_loadu_ps(q3 + c);
                a30 = _mm256_fmadd_ps(w, x0, a30);
                a31 = _mm256_fmadd_ps(w, x1, a31);
                a32 = _mm256_fmadd_ps(w, x2, a32);
            }
            store4(sh, bs, i, _mm_mul_ps(sc, hsum4(a00, a10, a20, a30)));
            store4(sh, bs, i + 1, _mm_mul_ps(sc, hsum4(a01, a11, a21, a31)));
            store4(sh, bs, i + 2, _mm_mul_ps(sc, hsum4(a02, a12, a22, a32)));
        }
        for (; i < b; ++i) {
            const float* k0 = krow[i];
            if (pf && h0 == 0)
                for (int c = 0; c < d; c += 16) _mm_prefetch((const char*)(pf[i] + c), _MM_HINT_T0);
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int c = 0; c < d; c += 8) {
                const __m256 x0 = _mm256_loadu_ps(k0 + c);
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + c), x0, a0);
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + c), x0, a1);
                a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q2 + c), x0, a2);
                a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q3 + c), x0, a3);
            }
            store4(sh, bs, i, _mm_mul_ps(sc, hsum4(a0, a1, a2, a3)));
        }
    }
}

// fast_exp (group_flash_kernels.hpp), 8 lanes.
RETRO_AVX2 inline __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(kExpLo);
    const __m256 zero = _mm256_cmp_ps(x, lo, _CMP_NGE_UQ);  // x < lo, or NaN
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    const __m256 xc = _mm256_max_ps(x, lo);
    const __m256 magic = _mm256_set1_ps(kRoundMagic);
    const __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(xc, _mm256_set1_ps(kLog2e), magic), magic);
    const __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), xc));
    __m256 p = _mm256_set1_ps(kP0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
    const __m256 er = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const __m256 y = _mm256_mul_ps(er, _mm256_castsi256_ps(bits));
    return _mm256_blendv_ps(_mm256_andnot_ps(zero, y), x, nan);
}

RETRO_AVX2 void exp_avx2(float* x, int count) {
    int i = 0;
    for (; i + 8 <= count; i += 8) _mm256_storeu_ps(x + i, exp8(_mm256_loadu_ps(x + i)));
    for (; i < count; ++i) x[i] = fast_exp(x[i]);
}

// Four heads x 16 columns of the accumulator held in registers across kRows value rows, then the next 16
// columns of the same rows: each value row is read from memory once, and the kRows rows (16 KB at d = 128)
// stay in L1 across the column sweeps (a whole block's rows, 512 B apart, would fall into 8 of L1's 64
// sets at each column and evict each other). d % 16 == 0.
constexpr int kRows = 32;
RETRO_AVX2 void accumulate_avx2(const float* e, int gp, const float* const* vrow, int b, int d, float* acc,
                                int bs, const float* const* pf) {
    const int lines = d / 16;
    int t = 0;
    for (int h0 = 0; h0 < gp; h0 += 4) {
        const float *e0 = e + (size_t)h0 * bs, *e1 = e0 + bs, *e2 = e1 + bs, *e3 = e2 + bs;
        float *o0 = acc + (size_t)h0 * d, *o1 = o0 + d, *o2 = o1 + d, *o3 = o2 + d;
        for (int r0 = 0; r0 < b; r0 += kRows) {
            const int r1 = std::min(b, r0 + kRows);
            for (int c = 0; c < d; c += 16) {
                __m256 a00 = _mm256_loadu_ps(o0 + c), a01 = _mm256_loadu_ps(o0 + c + 8);
                __m256 a10 = _mm256_loadu_ps(o1 + c), a11 = _mm256_loadu_ps(o1 + c + 8);
                __m256 a20 = _mm256_loadu_ps(o2 + c), a21 = _mm256_loadu_ps(o2 + c + 8);
                __m256 a30 = _mm256_loadu_ps(o3 + c), a31 = _mm256_loadu_ps(o3 + c + 8);
                for (int i = r0; i < r1; ++i) {
                    if (pf && h0 == 0) {  // one line of the next block per step, in address order
                        _mm_prefetch((const char*)(pf[t / lines] + (t % lines) * 16), _MM_HINT_T0);
                        ++t;
                    }
                    const __m256 v0 = _mm256_loadu_ps(vrow[i] + c), v1 = _mm256_loadu_ps(vrow[i] + c + 8);
                    __m256 w = _mm256_broadcast_ss(e0 + i);
                    a00 = _mm256_fmadd_ps(w, v0, a00);
                    a01 = _mm256_fmadd_ps(w, v1, a01);
                    w = _mm256_broadcast_ss(e1 + i);
                    a10 = _mm256_fmadd_ps(w, v0, a10);
                    a11 = _mm256_fmadd_ps(w, v1, a11);
                    w = _mm256_broadcast_ss(e2 + i);
                    a20 = _mm256_fmadd_ps(w, v0, a20);
                    a21 = _mm256_fmadd_ps(w, v1, a21);
                    w = _mm256_broadcast_ss(e3 + i);
                    a30 = _mm256_fmadd_ps(w, v0, a30);
                    a31 = _mm256_fmadd_ps(w, v1, a31);
                }
                _mm256_storeu_ps(o0 + c, a00);
                _mm256_storeu_ps(o0 + c + 8, a01);
                _mm256_storeu_ps(o1 + c, a10);
                _mm256_storeu_ps(o1 + c + 8, a11);
                _mm256_storeu_ps(o2 + c, a20);
                _mm256_storeu_ps(o2 + c + 8, a21);
                _mm256_storeu_ps(o3 + c, a30);
                _mm256_storeu_ps(o3 + c + 8, a31);
            }
        }
    }
}

#undef RETRO_AVX2

}  // namespace

const Kernels* avx2_kernels() {
    static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    static const Kernels k{score_avx2, exp_avx2, accumulate_avx2, "avx2"};
    return ok ? &k : nullptr;
}
#else
const Kernels* avx2_kernels() { return nullptr; }
#endif

}  // namespace retro::flash
