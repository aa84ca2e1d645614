#include "cluster/pq.hpp"

#ifndef RETRO_NO_BLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "core/error.hpp"
#include "core/serial_blas.hpp"

namespace retro {

namespace {
constexpr int kRowBlock = 1024;  // rows per GEMM block: a [1024, 256] score tile stays in L2
}

void nearest_centroids_l2(const float* x, int n, int ldx, const float* c, int k, int dsub, int32_t* out,
                          float* dist2) {
    std::vector<float> cn((size_t)k);
    for (int j = 0; j < k; ++j) {
        const float* cj = c + (size_t)j * dsub;
        float s = 0;
        for (int e = 0; e < dsub; ++e) s += cj[e] * cj[e];
        cn[(size_t)j] = s;
    }
    std::vector<float> g((size_t)kRowBlock * k);
    // OpenBLAS's result depends on its thread count in the last bits (a near-tie's code with it): one thread,
    // so the codebooks and codes are the same whoever builds them (a runner with one worker, the GPU path's
    // heads built side by side, its twin's test beside the CPU method)
    const SerialBlas serial;
    for (int r0 = 0; r0 < n; r0 += kRowBlock) {
        const int rb = std::min(kRowBlock, n - r0);
        // g[rb, k] = X_block · Cᵀ
#ifndef RETRO_NO_BLAS
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rb, k, dsub, 1.0f, x + (size_t)r0 * ldx, ldx, c,
                    dsub, 0.0f, g.data(), k);
#else
        // The GPU-only build (docs/cuda.md) has no BLAS: the same products as plain loops (the PQ GPU
        // twin's codebooks there; summation order, so a near-tie's code, may differ from BLAS's)
        for (int i = 0; i < rb; ++i)
            for (int j = 0; j < k; ++j) {
                const float* xi = x + (size_t)(r0 + i) * ldx;
                const float* cj = c + (size_t)j * dsub;
                float acc = 0;
                for (int e = 0; e < dsub; ++e) acc += xi[e] * cj[e];
                g[(size_t)i * k + j] = acc;
            }
#endif
        for (int i = 0; i < rb; ++i) {
            // argmin_j ||c_j||² − 2 x·c_j (||x||² is common to every j)
            const float* gi = g.data() + (size_t)i * k;
            int best = 0;
            float bv = cn[0] - 2.0f * gi[0];
            for (int j = 1; j < k; ++j) {
                const float v = cn[(size_t)j] - 2.0f * gi[j];
                if (v < bv) {
                    bv = v;
                    best = j;
                }
            }
            out[r0 + i] = best;
            if (dist2) {
                const float* xi = x + (size_t)(r0 + i) * ldx;
                float xn = 0;
                for (int e = 0; e < dsub; ++e) xn += xi[e] * xi[e];
                dist2[r0 + i] = std::max(0.0f, xn + bv);
            }
        }
    }
}

ProductQuantizer::ProductQuantizer(int d, const PQParams& p) : p_(p), d_(d) {
    check(d, p);
    dsub_ = d / p.m;
    ksub_ = 1 << p.nbits;
    centroids_.assign((size_t)p.m * ksub_ * dsub_, 0.0f);
}

void ProductQuantizer::check(int d, const PQParams& p) {
    if (d < 1) throw ParamError("pq: dimension " + std::to_string(d) + " must be >= 1");
    if (p.m < 1 || d % p.m != 0)
        throw ParamError("pq: m = " + std::to_string(p.m) + " must divide the head dimension " + std::to_string(d));
    if (p.nbits < 1 || p.nbits > 16)
        throw ParamError("pq: nbits = " + std::to_string(p.nbits) + " must be in [1, 16]");
    if (p.iters < 1) throw ParamError("pq: iters = " + std::to_string(p.iters) + " must be >= 1");
}

void ProductQuantizer::train(const float* x, int n) {
    if (n < 1) throw ParamError("pq: training needs at least one row");
    if (d_ == 0) throw ParamError("pq: quantizer not constructed");
    const int K = ksub_, ds = dsub_;
    std::vector<int32_t> assign((size_t)n);
    std::vector<float> dist((size_t)n);
    std::vector<double> sum((size_t)K * ds);
    std::vector<int> count((size_t)K);
    std::mt19937 rng(p_.seed);
    for (int j = 0; j < p_.m; ++j) {
        const float* xj = x + (size_t)j * ds;  // sub-vectors of rows: stride d_
        float* cj = centroids_.data() + (size_t)j * K * ds;
        auto set_centroid = [&](int c, int row) { std::copy(xj + (size_t)row * d_, xj + (size_t)row * d_ + ds, cj + (size_t)c * ds); };
        if (n <= K) {
            // every row its own centroid (the remaining ones repeat row 0): reconstruction is exact
            for (int c = 0; c < K; ++c) set_centroid(c, c < n ? c : 0);
            continue;
        }
        // K distinct rows drawn with the seed (partial Fisher-Yates)
        std::vector<int> perm((size_t)n);
        std::iota(perm.begin(), perm.end(), 0);
        for (int c = 0; c < K; ++c) {
            std::uniform_int_distribution<int> U(c, n - 1);
            std::swap(perm[(size_t)c], perm[(size_t)U(rng)]);
            set_centroid(c, perm[(size_t)c]);
        }
        for (int it = 0; it < p_.iters; ++it) {
            nearest_centroids_l2(xj, n, d_, cj, K, ds, assign.data(), dist.data());
            std::fill(sum.begin(), sum.end(), 0.0);
            std::fill(count.begin(), count.end(), 0);
            for (int i = 0; i < n; ++i) {
                const int a = assign[(size_t)i];
                ++count[(size_t)a];
                const float* xi = xj + (size_t)i * d_;
                double* s = sum.data() + (size_t)a * ds;
                for (int e = 0; e < ds; ++e) s[e] += xi[e];
            }
            // empty clusters take the rows farthest from their centroids (largest error first)
            std::vector<int> far;
            size_t next_far = 0;
            for (int c = 0; c < K; ++c) {
                if (count[(size_t)c] > 0) {
                    for (int e = 0; e < ds; ++e)
                        cj[(size_t)c * ds + e] = (float)(sum[(size_t)c * ds + e] / count[(size_t)c]);
                    continue;
                }
                if (far.empty()) {
                    far.resize((size_t)n);
                    std::iota(far.begin(), far.end(), 0);
                    std::stable_sort(far.begin(), far.end(),
                                     [&](int a, int b) { return dist[(size_t)a] > dist[(size_t)b]; });
                }
                set_centroid(c, far[next_far++ % far.size()]);
            }
        }
    }
}

void ProductQuantizer::encode(const float* x, int n, uint16_t* codes) const {
    std::vector<int32_t> a((size_t)n);
    for (int j = 0; j < p_.m; ++j) {
        nearest_centroids_l2(x + (size_t)j * dsub_, n, d_, centroids(j), ksub_, dsub_, a.data());
        for (int i = 0; i < n; ++i) codes[(size_t)i * p_.m + j] = (uint16_t)a[(size_t)i];
    }
}

void ProductQuantizer::decode(const uint16_t* codes, int n, float* rows) const {
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < p_.m; ++j) {
            const float* c = centroids(j) + (size_t)codes[(size_t)i * p_.m + j] * dsub_;
            std::copy(c, c + dsub_, rows + (size_t)i * d_ + (size_t)j * dsub_);
        }
}

void ProductQuantizer::inner_product_table(const float* q, float* lut) const {
    for (int j = 0; j < p_.m; ++j) {
        const float* qj = q + (size_t)j * dsub_;
        const float* cj = centroids(j);
        for (int c = 0; c < ksub_; ++c) {
            const float* cc = cj + (size_t)c * dsub_;
            float s = 0;
            for (int e = 0; e < dsub_; ++e) s += qj[e] * cc[e];
            lut[(size_t)j * ksub_ + c] = s;
        }
    }
}

}  // namespace retro
