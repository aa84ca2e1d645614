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

// out: [rows, cols] = x: [rows, d] times c: [cols, d] transposed (row-major).
void inner_products(const float* x, int rows, const float* c, int cols, int d, float* out) {
#ifndef RETRO_NO_BLAS
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, d, 1.0f, x, d, c, d, 0.0f, out, cols);
#else
    // The GPU-only build (docs/cuda.md) has no BLAS: the same products, plain loops (slower, and
    // summation order may differ from the BLAS kernel's in the last bits).
    for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) {
            const float* xr = x + (size_t)i * d;
            const float* cr = c + (size_t)j * d;
            float acc = 0;
            for (int e = 0; e < d; ++e) acc += xr[e] * cr[e];
            out[(size_t)i * cols + j] = acc;
        }
#endif
}

// inv = 1 / |v| for v: [d] (norm accumulated in double); false (inv untouched) when |v|^2 is not > 0.
bool inverse_norm(const float* v, int d, float& inv) {
    double nn = 0;
    for (int e = 0; e < d; ++e) nn += (double)v[e] * v[e];
    if (!(nn > 0)) return false;
    inv = (float)(1.0 / std::sqrt(nn));
    return true;
}

// Rows of v: [rows, d] scaled to unit length; zero rows stay as they are.
void normalize_rows(float* v, int rows, int d) {
    for (int j = 0; j < rows; ++j) {
        float* r = v + (size_t)j * d;
        float inv;
        if (inverse_norm(r, d, inv))
            for (int e = 0; e < d; ++e) r[e] *= inv;
    }
}

// Counting sort of the positions [0, m) by key[i] in [0, buckets): begin: [buckets + 1], order: [m]
// (positions of bucket b at [begin[b], begin[b+1]), ascending).
template <class Pos>
void bucket_positions(const int32_t* key, size_t m, int buckets, std::vector<Pos>& begin, std::vector<Pos>& order) {
    begin.assign((size_t)buckets + 1, 0);
    for (size_t i = 0; i < m; ++i) ++begin[(size_t)key[i] + 1];
    for (int b = 0; b < buckets; ++b) begin[(size_t)b + 1] += begin[(size_t)b];
    order.resize(m);
    std::vector<Pos> fill(begin.begin(), begin.end() - 1);
    for (size_t i = 0; i < m; ++i) order[(size_t)fill[(size_t)key[i]]++] = (Pos)i;
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
        inner_products(x + (size_t)r0 * d, rows, c + (size_t)t0 * d, cols, d, scratch);
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
    int segment;  // the segment of rows [r0, r1)
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
            t.push_back({r, std::min(r + kRowBlock, plan.row_begin[s + 1]), c0, c1, s});
    }
    return t;
}

// best_out (optional, [n]): each row's best score.
void run_assign(const float* x, const float* c, int d, const std::vector<Task>& tasks, int threads,
                int32_t* assign, float* best_out = nullptr) {
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        std::vector<float> scratch((size_t)kRowBlock * kColTile);
        std::vector<float> best(kRowBlock);
#pragma omp for schedule(dynamic, 1)
        for (long i = 0; i < (long)tasks.size(); ++i) {
            const Task& t = tasks[(size_t)i];
            assign_block(x, t.r0, t.r1, c, t.c0, t.c1, d, assign, best_out ? best_out + t.r0 : best.data(),
                         scratch.data());
        }
    }
}

// Spherical update within each segment: c_j = normalize(sum of its rows); empty clusters (or a zero
// sum) keep their centroid.
void run_update(const float* x, const KMeansPlan& plan, int d, const int32_t* assign, int threads,
                const std::vector<char>& active, float* cent) {
    const int S = plan.segments();
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        std::vector<float> sums;
        std::vector<int32_t> cnt;
#pragma omp for schedule(dynamic, 1)
        for (int s = 0; s < S; ++s) {
            if (!active[(size_t)s]) continue;
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
                float inv;
                if (!inverse_norm(acc, d, inv)) continue;
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
        case FinalAssign::none:
        case FinalAssign::probe: break;
    }
    return 0;
}

KMeansPlan kmeans_plan(int n, const KMeansParams& p) {
    if (n <= 0) throw ParamError("k-means: no rows to cluster (n = " + std::to_string(n) + ")");
    auto bad = [](const char* name, const std::string& value, const char* want) {
        throw ParamError(std::string("k-means: parameter '") + name + "' = " + value + ": expected " + want);
    };
    if (p.iters < 1) bad("iters", std::to_string(p.iters), ">= 1");
    if (p.segment < 0) bad("segment", std::to_string(p.segment), "0 (global) or a positive row count");
    if (p.final_radius < 0) bad("final_radius", std::to_string(p.final_radius), ">= 0 segments");
    if (p.final_lists < 0) bad("final_lists", std::to_string(p.final_lists), ">= 0 (0 = round(sqrt(k)))");
    if (p.final_probe < 1) bad("final_probe", std::to_string(p.final_probe), ">= 1 lists");
    if (p.k < 0) bad("k", std::to_string(p.k), ">= 0");
    if (p.k == 0 && !(p.tokens_per_cluster >= 1.0))
        bad("tokens_per_cluster", std::to_string(p.tokens_per_cluster), ">= 1");
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

void kmeans_probe_assign(const float* xc, int d, const float* cent, const KMeansPlan& plan,
                         const KMeansParams& p, int threads, int32_t* assign) {
    const int n = plan.n, K = plan.k;
    threads = std::max(1, threads);
    // Own segment: the within-segment assignment with each row's best score.
    std::vector<float> own_best((size_t)n);
    run_assign(xc, cent, d, make_tasks(plan, 0), threads, assign, own_best.data());

    // Coarse lists: spherical k-means of the normalized centroids (one segment).
    const int L = std::min(K, p.final_lists > 0 ? p.final_lists
                                                : std::max(1, (int)std::lround(std::sqrt((double)K))));
    const int P = std::min(p.final_probe, L);
    std::vector<float> unit(cent, cent + (size_t)K * d);
    normalize_rows(unit.data(), K, d);
    KMeansParams cp;
    cp.k = L;
    cp.segment = 0;
    cp.iters = 10;
    cp.center = false;
    cp.final_assign = FinalAssign::none;
    cp.normalize_init = true;
    cp.threads = threads;
    const KMeansResult coarse = segmented_kmeans(unit.data(), K, d, cp);
    // Lists as CSR over centroid ids (ascending within a list) and their member centroids gathered.
    std::vector<int32_t> list_begin, members;
    bucket_positions(coarse.assign.data(), (size_t)K, L, list_begin, members);
    std::vector<float> gathered((size_t)K * d);
    for (int i = 0; i < K; ++i)
        std::copy(cent + (size_t)members[(size_t)i] * d, cent + (size_t)(members[(size_t)i] + 1) * d,
                  gathered.begin() + (ptrdiff_t)((size_t)i * d));

    // Probe: each row's P best lists by x . (list mean), ties to the lower list.
    std::vector<int32_t> probe((size_t)n * P);
    {
        const float* lc = coarse.centroids.data();
        const int blocks = (n + kRowBlock - 1) / kRowBlock;
#pragma omp parallel num_threads(threads) if (threads > 1)
        {
            std::vector<float> sc((size_t)kRowBlock * L);
            std::vector<int32_t> idx((size_t)L);
#pragma omp for schedule(dynamic, 1)
            for (int b = 0; b < blocks; ++b) {
                const int r0 = b * kRowBlock, rows = std::min(kRowBlock, n - r0);
                inner_products(xc + (size_t)r0 * d, rows, lc, L, d, sc.data());
                for (int i = 0; i < rows; ++i) {
                    const float* s = sc.data() + (size_t)i * L;
                    for (int l = 0; l < L; ++l) idx[(size_t)l] = l;
                    auto better = [&](int32_t a, int32_t c) { return s[a] > s[c] || (s[a] == s[c] && a < c); };
                    std::partial_sort(idx.begin(), idx.begin() + P, idx.end(), better);
                    std::copy(idx.begin(), idx.begin() + P, probe.begin() + (ptrdiff_t)((size_t)(r0 + i) * P));
                }
            }
        }
    }

    // Inverted: the rows probing each list, in row order; tasks of <= kRowBlock rows of one list.
    std::vector<int64_t> inv_begin, inv;  // inv entry = row * P + probe slot
    bucket_positions(probe.data(), probe.size(), L, inv_begin, inv);
    struct ListTask {
        int list;
        int64_t e0, e1;
    };
    std::vector<ListTask> tasks;
    for (int l = 0; l < L; ++l)
        for (int64_t e = inv_begin[(size_t)l]; e < inv_begin[(size_t)l + 1]; e += kRowBlock)
            tasks.push_back({l, e, std::min<int64_t>(e + kRowBlock, inv_begin[(size_t)l + 1])});

    // Each (row, slot): the best centroid of the slot's list (ties: lower id, as members ascend).
    std::vector<float> slot_best((size_t)n * P);
    std::vector<int32_t> slot_id((size_t)n * P);
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        std::vector<float> rows_buf((size_t)kRowBlock * d), scratch((size_t)kRowBlock * kColTile),
            best(kRowBlock);
        std::vector<int32_t> local(kRowBlock);
#pragma omp for schedule(dynamic, 1)
        for (long t = 0; t < (long)tasks.size(); ++t) {
            const ListTask& lt = tasks[(size_t)t];
            const int rows = (int)(lt.e1 - lt.e0);
            for (int i = 0; i < rows; ++i) {
                const int64_t row = inv[(size_t)(lt.e0 + i)] / P;
                std::copy(xc + (size_t)row * d, xc + (size_t)(row + 1) * d,
                          rows_buf.begin() + (ptrdiff_t)((size_t)i * d));
            }
            const int c0 = list_begin[(size_t)lt.list], m = list_begin[(size_t)lt.list + 1] - c0;
            if (m == 0) {  // an empty list (its coarse centroid kept from an earlier pass) has no winner
                for (int i = 0; i < rows; ++i) {
                    const int64_t e = inv[(size_t)(lt.e0 + i)];
                    slot_best[(size_t)e] = kNegInf;
                    slot_id[(size_t)e] = std::numeric_limits<int32_t>::max();
                }
                continue;
            }
            assign_block(rows_buf.data(), 0, rows, gathered.data() + (size_t)c0 * d, 0, m, d, local.data(),
                         best.data(), scratch.data());
            for (int i = 0; i < rows; ++i) {
                const int64_t e = inv[(size_t)(lt.e0 + i)];
                slot_best[(size_t)e] = best[(size_t)i];
                slot_id[(size_t)e] = members[(size_t)(c0 + local[(size_t)i])];
            }
        }
    }

    // Each row: the best of its own segment's and its slots' winners (ties: lower id).
    for (int r = 0; r < n; ++r) {
        float b = own_best[(size_t)r];
        int32_t a = assign[r];
        for (int s = 0; s < P; ++s) {
            const size_t e = (size_t)r * P + (size_t)s;
            if (slot_best[e] > b || (slot_best[e] == b && slot_id[e] < a)) b = slot_best[e], a = slot_id[e];
        }
        assign[r] = a;
    }
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
    if (p.normalize_init) normalize_rows(cent, K, d);  // spherical k-means proper (FAISS does this); the
                                                          // public code does not
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
    // A segment whose assignment repeats the previous pass's is at a fixed point: its update would give
    // the same centroids again, and every later pass the same assignment. It stops there (stop_converged),
    // with exactly the result the remaining passes would give.
    res.assign.assign((size_t)n, 0);
    std::vector<char> active((size_t)S, 1);
    std::vector<int32_t> prev;
    for (int it = 0; it + 1 < p.iters; ++it) {
        std::vector<Task> tasks;
        for (const Task& t : seg_tasks)
            if (active[(size_t)t.segment]) tasks.push_back(t);
        if (tasks.empty()) break;
        const bool check = p.stop_converged && it > 0;
        if (check) prev = res.assign;
        run_assign(xc, cent.data(), d, tasks, threads, res.assign.data());
        for (int s = 0; s < S; ++s) {
            if (!active[(size_t)s]) continue;
            ++res.segment_passes;
            const auto b = res.assign.begin() + plan.row_begin[(size_t)s],
                       e = res.assign.begin() + plan.row_begin[(size_t)s + 1];
            if (check && std::equal(b, e, prev.begin() + plan.row_begin[(size_t)s])) active[(size_t)s] = 0;
        }
        run_update(xc, plan, d, res.assign.data(), threads, active, cent.data());
    }

    // ---- final assignment and un-normalized mean centroids ----
    if (p.final_assign == FinalAssign::probe && S > 1)  // (one segment: its own centroids are all of them)
        kmeans_probe_assign(xc, d, cent.data(), plan, p, threads, res.assign.data());
    else
        run_assign(xc, cent.data(), d, make_tasks(plan, kmeans_final_radius(p, S)), threads,
                   res.assign.data());
    kmeans_finish(x, cent.data(), res);
    return res;
}

}  // namespace retro
