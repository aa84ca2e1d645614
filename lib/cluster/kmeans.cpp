#include "cluster/kmeans.hpp"

#ifndef RETRO_NO_BLAS
#include <cblas.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#if defined(__SSE__) || defined(__x86_64__)
#include <immintrin.h>
#define RETRO_KMEANS_SSE 1
#endif

#include "core/serial_blas.hpp"
#include "core/error.hpp"

namespace retro {

namespace {

constexpr int kRowBlock = 256;   // rows per GEMM block (one task)
constexpr int kColTile = 1024;   // centroids per GEMM tile: the score tile (256 x 1024 floats) stays in L2

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline float max_of(const float* s, int n) {
    int j = 0;
#ifdef RETRO_KMEANS_SSE
    __m128 m0 = _mm_set1_ps(kNegInf), m1 = m0, m2 = m0, m3 = m0;
    for (; j + 16 <= n; j += 16) {
        m0 = _mm_max_ps(m0, _mm_loadu_ps(s + j));
        m1 = _mm_max_ps(m1, _mm_loadu_ps(s + j + 4));
        m2 = _mm_max_ps(m2, _mm_loadu_ps(s + j + 8));
        m3 = _mm_max_ps(m3, _mm_loadu_ps(s + j + 12));
    }
    m0 = _mm_max_ps(_mm_max_ps(m0, m1), _mm_max_ps(m2, m3));
    float t[4];
    _mm_storeu_ps(t, m0);
    float m = std::max(std::max(t[0], t[1]), std::max(t[2], t[3]));
#else
    float m = kNegInf;
#endif
    for (; j < n; ++j) m = std::max(m, s[j]);
    return m;
}

// Rows [r0, r1) of x against centroids [c0, c1): assign[r] (global row index) and best[r - r0].
// scratch holds kRowBlock * kColTile floats.
void assign_block(const float* x, int r0, int r1, const float* c, int c0, int c1, int d,
                  int32_t* assign, float* best, float* scratch) {
    const int rows = r1 - r0;
    for (int i = 0; i < rows; ++i) {
        best[i] = kNegInf;
        assign[r0 + i] = c0;
    }
    for (int t0 = c0; t0 < c1; t0 += kColTile) {
        const int cols = std::min(kColTile, c1 - t0);
#ifndef RETRO_NO_BLAS
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, d, 1.0f, x + (size_t)r0 * d, d,
                    c + (size_t)t0 * d, d, 0.0f, scratch, cols);
#else
        // The GPU-only build (docs/cuda.md) has no BLAS: the same products, plain loops (slower, and
        // summation order may differ from the BLAS kernel's in the last bits).
        for (int i = 0; i < rows; ++i)
            for (int j = 0; j < cols; ++j) {
                const float* xr = x + (size_t)(r0 + i) * d;
                const float* cr = c + (size_t)(t0 + j) * d;
                float acc = 0;
                for (int e = 0; e < d; ++e) acc += xr[e] * cr[e];
                scratch[(size_t)i * cols + j] = acc;
            }
#endif
        for (int i = 0; i < rows; ++i) {
            const float* s = scratch + (size_t)i * cols;
            const float m = max_of(s, cols);
            if (m > best[i]) {  // strict: an earlier tile wins ties
                int j = 0;
                while (j < cols - 1 && !(s[j] == m)) ++j;
                best[i] = m;
                assign[r0 + i] = t0 + j;
            }
        }
    }
}

struct Task {
    int r0, r1, c0, c1;
};

// Row blocks of every segment, each against the clusters of segments [s - radius, s + radius] (a
// contiguous range; radius < 0: all clusters).
std::vector<Task> make_tasks(const KMeansPlan& plan, int radius) {
    std::vector<Task> t;
    const int S = plan.segments();
    for (int s = 0; s < S; ++s) {
        const int c0 = radius < 0 ? 0 : plan.cluster_begin[std::max(0, s - radius)];
        const int c1 = radius < 0 ? plan.k : plan.cluster_begin[std::min(S, s + radius + 1)];
        for (int r = plan.row_begin[s]; r < plan.row_begin[s + 1]; r += kRowBlock)
            t.push_back({r, std::min(r + kRowBlock, plan.row_begin[s + 1]), c0, c1});
    }
    return t;
}

void run_assign(const float* x, const float* c, int d, const std::vector<Task>& tasks, int threads,
                int32_t* assign) {
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        std::vector<float> scratch((size_t)kRowBlock * kColTile);
        std::vector<float> best(kRowBlock);
#pragma omp for schedule(dynamic, 1)
        for (long i = 0; i < (long)tasks.size(); ++i) {
            const Task& t = tasks[(size_t)i];
            assign_block(x, t.r0, t.r1, c, t.c0, t.c1, d, assign, best.data(), scratch.data());
        }
    }
}

// Spherical update within each segment: c_j = normalize(sum of its rows); empty clusters (or a zero
// sum) keep their centroid.
void run_update(const float* x, const KMeansPlan& plan, int d, const int32_t* assign, int threads,
                float* cent) {
    const int S = plan.segments();
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        std::vector<float> sums;
        std::vector<int32_t> cnt;
#pragma omp for schedule(dynamic, 1)
        for (int s = 0; s < S; ++s) {
            const int c0 = plan.cluster_begin[s], ks = plan.cluster_begin[s + 1] - c0;
            sums.assign((size_t)ks * d, 0.0f);
            cnt.assign((size_t)ks, 0);
            for (int r = plan.row_begin[s]; r < plan.row_begin[s + 1]; ++r) {
                const int j = assign[r] - c0;
                float* acc = sums.data() + (size_t)j * d;
                const float* xr = x + (size_t)r * d;
                for (int e = 0; e < d; ++e) acc[e] += xr[e];
                ++cnt[(size_t)j];
            }
            for (int j = 0; j < ks; ++j) {
                if (cnt[(size_t)j] == 0) continue;
                const float* acc = sums.data() + (size_t)j * d;
                double nn = 0;
                for (int e = 0; e < d; ++e) nn += (double)acc[e] * acc[e];
                if (!(nn > 0)) continue;
                const float inv = (float)(1.0 / std::sqrt(nn));
                float* cj = cent + (size_t)(c0 + j) * d;
                for (int e = 0; e < d; ++e) cj[e] = acc[e] * inv;
            }
        }
    }
}

// OpenBLAS's thread count is process-wide: while k-means runs its own threads, BLAS stays serial
// (cluster/serial_blas.hpp).
#ifdef RETRO_NO_BLAS
int openblas_get_num_threads() { return 1; }
#endif
#ifndef _OPENMP
int omp_get_max_threads() { return 1; }
#endif

}  // namespace

int kmeans_final_radius(const KMeansParams& p, int segments) {
    switch (p.final_assign) {
        case FinalAssign::global: return segments > 1 ? -1 : 0;
        case FinalAssign::local: return std::min(p.final_radius, std::max(0, segments - 1));
        case FinalAssign::none: break;
    }
    return 0;
}

KMeansPlan kmeans_plan(int n, const KMeansParams& p) {
    if (n <= 0) throw ParamError("k-means: no rows to cluster (n = " + std::to_string(n) + ")");
    if (p.iters < 1)
        throw ParamError("k-means: parameter 'iters' = " + std::to_string(p.iters) + ": expected >= 1");
    if (p.segment < 0)
        throw ParamError("k-means: parameter 'segment' = " + std::to_string(p.segment) +
                         ": expected 0 (global) or a positive row count");
    if (p.final_radius < 0)
        throw ParamError("k-means: parameter 'final_radius' = " + std::to_string(p.final_radius) +
                         ": expected >= 0 segments");
    if (p.k < 0) throw ParamError("k-means: parameter 'k' = " + std::to_string(p.k) + ": expected >= 0");
    if (p.k == 0 && !(p.tokens_per_cluster >= 1.0))
        throw ParamError("k-means: parameter 'tokens_per_cluster' = " +
                         std::to_string(p.tokens_per_cluster) + ": expected >= 1");
    KMeansPlan plan;
    plan.n = n;
    long k = p.k > 0 ? p.k : std::max(1L, std::lround((double)n / p.tokens_per_cluster));
    plan.k = (int)std::min<long>(k, n);
    long S = (p.segment == 0 || p.segment >= n) ? 1 : std::max(1L, std::lround((double)n / p.segment));
    S = std::min<long>(S, plan.k);
    plan.row_begin.resize((size_t)S + 1);
    plan.cluster_begin.resize((size_t)S + 1);
    for (long s = 0; s <= S; ++s) {
        plan.row_begin[(size_t)s] = (int32_t)(s * n / S);
        plan.cluster_begin[(size_t)s] = (int32_t)(s * plan.k / S);
    }
    return plan;
}

void assign_max_inner_product(const float* x, int n, const float* c, int k, int d, int32_t* assign) {
    std::vector<float> scratch((size_t)kRowBlock * kColTile);
    std::vector<float> best(kRowBlock);
    for (int r = 0; r < n; r += kRowBlock)
        assign_block(x, r, std::min(n, r + kRowBlock), c, 0, k, d, assign, best.data(), scratch.data());
}

const float* kmeans_center(const float* x, int n, int d, bool center, std::vector<float>& mean,
                           std::vector<float>& centered) {
    mean.assign((size_t)d, 0.0f);
    if (!center) return x;
    std::vector<double> m((size_t)d, 0.0);
    for (int r = 0; r < n; ++r)
        for (int e = 0; e < d; ++e) m[(size_t)e] += x[(size_t)r * d + e];
    for (int e = 0; e < d; ++e) mean[(size_t)e] = (float)(m[(size_t)e] / n);
    centered.resize((size_t)n * d);
    for (int r = 0; r < n; ++r)
        for (int e = 0; e < d; ++e) centered[(size_t)r * d + e] = x[(size_t)r * d + e] - mean[(size_t)e];
    return centered.data();
}

void kmeans_initial_centroids(const float* xc, int d, const KMeansPlan& plan, const KMeansParams& p,
                              float* cent) {
    const int K = plan.k, S = plan.segments();
    std::mt19937 rng(p.seed);
    for (int s = 0; s < S; ++s) {
        const int r0 = plan.row_begin[s], ns = plan.row_begin[s + 1] - r0;
        const int c0 = plan.cluster_begin[s], ks = plan.cluster_begin[s + 1] - c0;
        for (int i = 0; i < ks; ++i) {
            const double u = p.seed == 0 ? 0.5 : (double)(rng() >> 8) * (1.0 / 16777216.0);
            const long off = std::min<long>(ns - 1, (long)std::floor((i + u) * ns / ks));
            std::copy(xc + (size_t)(r0 + off) * d, xc + (size_t)(r0 + off + 1) * d, cent + (size_t)(c0 + i) * d);
        }
    }
    if (p.normalize_init) {  // spherical k-means proper (FAISS does this); the public code does not
        for (int j = 0; j < K; ++j) {
            float* cj = cent + (size_t)j * d;
            double nn = 0;
            for (int e = 0; e < d; ++e) nn += (double)cj[e] * cj[e];
            if (!(nn > 0)) continue;
            const float inv = (float)(1.0 / std::sqrt(nn));
            for (int e = 0; e < d; ++e) cj[e] *= inv;
        }
    }
}

void kmeans_finish(const float* x, const float* cent, KMeansResult& res) {
    const int n = res.n, d = res.d, K = res.k;
    res.sizes.assign((size_t)K, 0);
    std::vector<double> sums((size_t)K * d, 0.0);
    for (int r = 0; r < n; ++r) {
        const int j = res.assign[(size_t)r];
        ++res.sizes[(size_t)j];
        double* acc = sums.data() + (size_t)j * d;
        const float* xr = x + (size_t)r * d;
        for (int e = 0; e < d; ++e) acc[e] += xr[e];
    }
    res.centroids.resize((size_t)K * d);
    for (int j = 0; j < K; ++j) {
        float* cj = res.centroids.data() + (size_t)j * d;
        const int sz = res.sizes[(size_t)j];
        for (int e = 0; e < d; ++e)
            cj[e] = sz > 0 ? (float)(sums[(size_t)j * d + e] / sz) : cent[(size_t)j * d + e] + res.mean[(size_t)e];
    }
}

KMeansResult segmented_kmeans(const float* x, int n, int d, const KMeansParams& p) {
    if (d <= 0) throw ParamError("k-means: dimension d = " + std::to_string(d) + ": expected >= 1");
    KMeansResult res;
    res.plan = kmeans_plan(n, p);
    const KMeansPlan& plan = res.plan;
    res.n = n;
    res.d = d;
    res.k = plan.k;
    const int K = plan.k, S = plan.segments();

    int threads = p.threads;
    if (threads <= 0) threads = std::max(1, std::min(openblas_get_num_threads(), omp_get_max_threads()));
    const auto seg_tasks = make_tasks(plan, 0);
    threads = std::min(threads, (int)seg_tasks.size());
    SerialBlas serial_blas(threads > 1);

    std::vector<float> centered;
    const float* xc = kmeans_center(x, n, d, p.center, res.mean, centered);
    std::vector<float> cent((size_t)K * d);
    kmeans_initial_centroids(xc, d, plan, p, cent.data());

    // ---- spherical iterations within segments ----
    res.assign.assign((size_t)n, 0);
    for (int it = 0; it + 1 < p.iters; ++it) {
        run_assign(xc, cent.data(), d, seg_tasks, threads, res.assign.data());
        run_update(xc, plan, d, res.assign.data(), threads, cent.data());
    }

    // ---- final assignment and un-normalized mean centroids ----
    run_assign(xc, cent.data(), d, make_tasks(plan, kmeans_final_radius(p, S)), threads, res.assign.data());
    kmeans_finish(x, cent.data(), res);
    return res;
}

}  // namespace retro
