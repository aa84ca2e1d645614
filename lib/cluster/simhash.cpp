#include "cluster/simhash.hpp"

#ifndef RETRO_NO_BLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "core/error.hpp"
#include "core/serial_blas.hpp"

namespace retro {

void SimHashTables::build(const float* x, int n, int d, const SimHashParams& p) {
    if (p.K < 0 || p.K > 30)
        throw ParamError("simhash: parameter 'K' = " + std::to_string(p.K) + ": expected 0..30 bits per table");
    if (p.L < 1) throw ParamError("simhash: parameter 'L' = " + std::to_string(p.L) + ": expected >= 1 tables");
    p_ = p;
    n_ = n;
    d_ = d;
    const int KL = p.K * p.L;
    planes_.assign((size_t)d * KL, 0.0f);
    std::mt19937_64 rng(p.seed ^ 0x9e3779b97f4a7c15ULL);
    std::normal_distribution<float> N(0.0f, 1.0f);
    for (auto& w : planes_) w = N(rng);
    codes_.assign((size_t)p.L, std::vector<uint32_t>((size_t)n, 0u));
    ids_.assign((size_t)p.L, std::vector<int32_t>((size_t)n));
    if (KL > 0 && n > 0) {
        const int B = 1024;
        std::vector<float> proj((size_t)B * KL);
        // OpenBLAS's products depend on its thread count in the last bits (a near-zero projection's sign
        // with them): one thread, so the codes are the same whoever builds them (pq.cpp likewise)
        const SerialBlas serial;
        for (int r0 = 0; r0 < n; r0 += B) {
            const int rows = std::min(B, n - r0);
#ifndef RETRO_NO_BLAS
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, KL, d, 1.0f, x + (size_t)r0 * d, d,
                        planes_.data(), KL, 0.0f, proj.data(), KL);
#else
            // The GPU-only build (docs/cuda.md) has no BLAS: the same products as plain loops (the MagicPIG GPU
            // twin's key codes there; summation order, so a near-zero projection's sign, may differ from BLAS's)
            for (int r = 0; r < rows; ++r)
                for (int c = 0; c < KL; ++c) {
                    float acc = 0;
                    for (int e = 0; e < d; ++e) acc += x[(size_t)(r0 + r) * d + e] * planes_[(size_t)e * KL + c];
                    proj[(size_t)r * KL + c] = acc;
                }
#endif
            for (int r = 0; r < rows; ++r)
                for (int t = 0; t < p.L; ++t) {
                    uint32_t c = 0;
                    const float* pr = proj.data() + (size_t)r * KL + (size_t)t * p.K;
                    for (int j = 0; j < p.K; ++j) c |= (uint32_t)(pr[j] > 0.0f) << j;
                    codes_[(size_t)t][(size_t)(r0 + r)] = c;
                }
        }
    }
    std::vector<uint32_t> tmp((size_t)n);
    for (int t = 0; t < p.L; ++t) {
        auto& id = ids_[(size_t)t];
        auto& cd = codes_[(size_t)t];
        std::iota(id.begin(), id.end(), 0);
        std::stable_sort(id.begin(), id.end(), [&](int32_t a, int32_t b) { return cd[(size_t)a] < cd[(size_t)b]; });
        for (int i = 0; i < n; ++i) tmp[(size_t)i] = cd[(size_t)id[(size_t)i]];
        cd.swap(tmp);
    }
}

void SimHashTables::codes(const float* v, uint32_t* out) const {
    const int KL = p_.K * p_.L;
    for (int t = 0; t < p_.L; ++t) {
        uint32_t c = 0;
        for (int j = 0; j < p_.K; ++j) {
            const int col = t * p_.K + j;
            float s = 0;
            for (int e = 0; e < d_; ++e) s += v[e] * planes_[(size_t)e * KL + col];
            c |= (uint32_t)(s > 0.0f) << j;
        }
        out[t] = c;
    }
}

size_t SimHashTables::collide(const uint32_t* qc, std::vector<uint32_t>& count,
                              std::vector<int32_t>& touched) const {
    size_t visited = 0;
    for (int t = 0; t < p_.L; ++t) {
        const auto& cd = codes_[(size_t)t];
        const auto r = std::equal_range(cd.begin(), cd.end(), qc[t]);
        const auto& id = ids_[(size_t)t];
        for (auto it = r.first; it != r.second; ++it) {
            const int32_t i = id[(size_t)(it - cd.begin())];
            if (count[(size_t)i]++ == 0) touched.push_back(i);
        }
        visited += (size_t)(r.second - r.first);
    }
    return visited;
}

double SimHashTables::table_bytes() const {
    return (double)p_.L * n_ * ((p_.K <= 16 ? 2.0 : 4.0) + 4.0);
}

double simhash_sample_probability(double cos_angle, int K, int L, int m) {
    if (m <= 0) return 1.0;
    if (m > L) return 0.0;
    const double c = std::clamp(cos_angle, -1.0, 1.0);
    const double p = 1.0 - std::acos(c) / M_PI;
    const double x = K == 0 ? 1.0 : std::pow(p, K);
    if (x >= 1.0) return 1.0;
    if (x <= 0.0) return 0.0;
    const double lx = std::log(x), l1x = std::log1p(-x), lgL = std::lgamma(L + 1.0);
    auto term = [&](int j) { return std::exp(lgL - std::lgamma(j + 1.0) - std::lgamma(L - j + 1.0) + j * lx + (L - j) * l1x); };
    double below = 0;
    for (int j = 0; j < m; ++j) below += term(j);
    if (1.0 - below > 1e-6) return 1.0 - below;
    double up = 0;
    for (int j = m; j <= L; ++j) {
        const double t = term(j);
        up += t;
        if (t < 1e-18 * up) break;
    }
    return up;
}

}  // namespace retro
