#pragma once
// Segmented spherical k-means (RetroInfer §4.2 "segmented clustering"; the public code is
// microsoft/RetrievalAttention cache_hub/kmeans.py::segment_k_means).
//
// The rows are (optionally) mean-centered, split into S contiguous segments of about `segment` rows,
// and each segment is clustered independently into its share of the k clusters:
//   init    centroid i of a segment of n_s rows and k_s clusters = row floor((i + 1/2) * n_s / k_s)
//           (evenly spaced rows, as the public code; seed != 0 draws the offset in each stride instead),
//           not normalized (as the public code) unless normalize_init
//   iters-1 spherical iterations: assign each row to argmax_j x.c_j over its segment's centroids
//           (inner product, lowest j on ties), then c_j = normalize(mean of its rows); an empty
//           cluster keeps its previous centroid; a segment whose pass repeats the previous pass's
//           assignment has reached a fixed point and skips the passes left (stop_converged: the same
//           result, bit for bit, as running them)
//   final   one more assignment (final_assign): against every centroid of every segment (global, as
//           the public code; cost n * k * d), against the centroids of the row's own segment and the
//           final_radius segments on either side (local; cost n * (2 final_radius + 1) * k/S * d, linear
//           in n for a fixed segment length), against the own segment's centroids and those of the
//           final_probe best of final_lists coarse lists (probe: an IVF over the centroids, see
//           kmeans_probe_assign), or none (own segment only: pure segmented k-means); then each
//           centroid becomes the un-normalized mean of its member rows in the input space (the
//           centering mean added back)
// so `iters` counts assignment passes. Assignment is a blocked float32 GEMM (cblas_sgemm, X·Cᵀ per block
// of rows and tile of centroids) followed by a row-wise argmax; the update is a scatter-add.
// Parallelism: OpenMP over (segment, row block) tasks with BLAS kept serial inside; results do not depend
// on the thread count.
#include <cstdint>
#include <vector>

namespace retro {

/// The final assignment pass of segmented k-means (see above).
enum class FinalAssign {
    none,    ///< own segment only (pure segmented k-means): O(n * k/S * d)
    global,  ///< every row against every centroid of every segment (public code): O(n * k * d)
    local,   ///< every row against its own segment's and final_radius neighbours' centroids: O(n * d)
    probe,   ///< every row against its own segment's centroids and those of its final_probe best coarse
             ///< lists (an IVF over the centroids): O(n * d * (L + final_probe * k / L)), L lists
};

struct KMeansParams {
    int k = 0;                        ///< clusters in total; 0 = max(1, round(n / tokens_per_cluster))
    double tokens_per_cluster = 16;   ///< used when k == 0 (RetroInfer §5: one centroid per 16 tokens)
    int segment = 8192;               ///< rows per segment; 0 or >= n = one segment (global k-means)
    int iters = 10;                   ///< assignment passes, the final (un-normalized) one included; >= 1
    bool center = true;               ///< subtract the mean row before clustering (added back at the end)
    FinalAssign final_assign = FinalAssign::global;  ///< the final pass (public code: global)
    int final_radius = 1;             ///< local: segments on either side of the row's own (>= 0)
    int final_lists = 0;              ///< probe: coarse lists over the k centroids; 0 = round(sqrt(k))
    int final_probe = 4;              ///< probe: lists each row is scored against (>= 1; >= lists: all)
    bool normalize_init = false;      ///< L2-normalize the initial centroids (the public code does not:
                                      ///< its first assignment scores raw keys; FAISS normalizes)
    bool stop_converged = true;       ///< a segment stops iterating once a pass repeats the previous
                                      ///< pass's assignment (a fixed point: the same result as going on)
    unsigned seed = 0;                ///< 0: stride midpoints (public code); else seeded offsets per stride
    int threads = 0;                  ///< OpenMP threads; 0 = min(OpenBLAS threads, omp_get_max_threads())
};

/// How the rows are split: computed from (n, params) alone, before any clustering.
struct KMeansPlan {
    int n = 0;
    int k = 0;                          ///< clusters in total (<= n)
    std::vector<int32_t> row_begin;     ///< [S + 1] rows of segment s: [row_begin[s], row_begin[s+1])
    std::vector<int32_t> cluster_begin; ///< [S + 1] clusters of segment s: [cluster_begin[s], ...[s+1])
    int segments() const { return (int)row_begin.size() - 1; }
};

/// S = 1 when segment == 0 or segment >= n, else max(1, round(n / segment)), reduced to k when k < S;
/// segment s holds rows [floor(s n / S), floor((s+1) n / S)) and clusters
/// [floor(s k / S), floor((s+1) k / S)) (equal shares, as the public code's reshape). Throws ParamError
/// on n <= 0 or impossible parameters.
KMeansPlan kmeans_plan(int n, const KMeansParams& p);

struct KMeansResult {
    int n = 0, d = 0, k = 0;
    KMeansPlan plan;
    std::vector<float> centroids;  ///< [k, d] mean of each cluster's rows (input space, not normalized);
                                   ///< an empty cluster keeps its last spherical centroid (+ mean)
    std::vector<int32_t> assign;   ///< [n] cluster of each row
    std::vector<int32_t> sizes;    ///< [k] rows per cluster (0 = empty)
    std::vector<float> mean;       ///< [d] the mean that was subtracted (zeros when !center)
    long segment_passes = 0;       ///< within-segment assignment passes run, summed over segments
                                   ///< (S * (iters - 1) unless segments stopped at a fixed point)
};

/// Clusters rows x: [n, d] row-major float32. Deterministic for fixed (x, params) whatever the thread
/// count. Throws ParamError on bad parameters.
KMeansResult segmented_kmeans(const float* x, int n, int d, const KMeansParams& p);

// The pieces segmented_kmeans is made of, shared with the GPU version (kernels/kmeans.cu) so both start
// from the same centroids and finish the same way.

/// Returns x itself (mean = zeros [d]) when !center, else centered = x - mean row ([n, d]) and its data.
const float* kmeans_center(const float* x, int n, int d, bool center, std::vector<float>& mean,
                           std::vector<float>& centered);
/// Initial centroids cent: [plan.k, d] from the (centered) rows xc: [n, d] (stride rows per segment,
/// normalized when p.normalize_init).
void kmeans_initial_centroids(const float* xc, int d, const KMeansPlan& plan, const KMeansParams& p,
                              float* cent);
/// From res.assign ([n], res.n/d/k/mean set): sizes and the un-normalized mean centroids of x: [n, d];
/// an empty cluster keeps cent[j] ([k, d], centered space) + mean.
void kmeans_finish(const float* x, const float* cent, KMeansResult& res);

/// Segments either side of a row's own that the final pass scores: -1 = all (global, S > 1), else
/// 0 (none: own segment, i.e. the within-segment assignment again; probe: its own-segment part) or
/// final_radius (local), clamped to S - 1. The same number drives the CPU tasks and the GPU kernel (kernels/kmeans.cu).
int kmeans_final_radius(const KMeansParams& p, int segments);

/// The probed final pass (final_assign = probe), over the centered rows xc: [n, d] and the spherical
/// centroids cent: [plan.k, d]:
///   lists   L = final_lists (0: round(sqrt(k))), at most k: spherical k-means (this file's, one
///           segment, 10 passes, normalized stride init) of the L2-normalized centroids into L lists;
///           each list is represented by the mean of its member centroids
///   probe   each row's final_probe lists of highest x . (list mean) (ties: lower list)
///   assign  each row's argmax of x . c_j over the centroids of its own segment and its probed lists
///           (ties: lower j), written to assign: [n]
/// Blocked sgemm throughout (rows of one list gathered into a block). With final_probe >= L every
/// centroid is scored: the result equals the global pass. Deterministic for any thread count.
void kmeans_probe_assign(const float* xc, int d, const float* cent, const KMeansPlan& plan,
                         const KMeansParams& p, int threads, int32_t* assign);

/// assign[i] = argmax_{j in [0, k)} x_i · c_j (lowest j on ties) for rows x: [n, d] and centroids
/// c: [k, d]; blocked sgemm + argmax, serial (the building block of segmented_kmeans).
void assign_max_inner_product(const float* x, int n, const float* c, int k, int d, int32_t* assign);

}  // namespace retro
