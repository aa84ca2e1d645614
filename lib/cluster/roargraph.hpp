#pragma once
// RoarGraph (Chen et al., VLDB 2024; public code matchyc/RoarGraph @7c9ef95, src/index_bipartite.cpp):
// a query-aware proximity graph over base vectors (here: keys) for maximum-inner-product search with
// out-of-distribution queries. RetrievalAttention's attention-aware index is this graph.
//
// Build, given keys [n, d] and training queries [m, d] (distance = -inner product throughout, as the
// public code's INNER_PRODUCT metric):
//   1. bipartite graph: each training query's exact top-nq keys by inner product (blocked sgemm);
//   2. projection: for each training query in order, its nearest key (the pivot) gets as neighbours the
//      query's other nq-1 keys, occlusion-pruned around the pivot (candidate p is dropped when some kept
//      r has -r.p < -pivot.p), at most M, padded back to M with the nearest dropped candidates; the
//      pivot's list is overwritten (public code); then reverse edges (a full list is re-pruned to M);
//      then a reverse-edge pass over every key and a re-prune of any list above M;
//   3. connectivity enhancement: every key is searched for in the graph (beam search from the entry
//      point, queue build_L); the expanded keys, minus the key's projection neighbours at the head of
//      the ranking, are occlusion-pruned to M "supply" neighbours, with reverse edges (a supply list
//      above 2M is re-pruned to M); supply lists above M are re-pruned; finally each key's adjacency is
//      its projection list followed by its supply neighbours not already there (degree <= 2M);
//   4. entry point: the key nearest (L2) to the mean key;
//   5. reachability repair (ours, not in the public code): keys not reachable from the entry point get
//      one in-edge from the nearest reachable key found by a beam search (NSG's tree spanning).
// Search: best-first beam search from the entry point with a sorted queue of capacity L; returns the
// best k expanded or queued keys. With L >= n and a graph connected from the entry point it is exact.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace retro {

/// a . b over d floats (eight independent accumulators, so it vectorizes without -ffast-math).
inline float dot_f32(const float* a, const float* b, int d) {
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int j = 0;
    for (; j + 8 <= d; j += 8)
        for (int u = 0; u < 8; ++u) s[u] += a[j + u] * b[j + u];
    for (; j < d; ++j) s[0] += a[j] * b[j];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

struct RoarGraphParams {
    int nq = 100;        ///< N_q: keys per training query in the bipartite graph (RoarGraph M_sq)
    int M = 35;          ///< max degree of the projection (RoarGraph M_pjbp)
    int build_L = 500;   ///< beam-search queue of the connectivity enhancement (RoarGraph L_pjpq)
    bool enhance = true; ///< run the connectivity enhancement (step 3)
    bool repair = true;  ///< make every key reachable from the entry point (step 5, ours)
    /// Step 3 in batches of this many consecutive keys: each batch's searches run in parallel over the
    /// graph as it stood when the batch began, then their lists and reverse edges are applied in key
    /// order. 1 = the serial order (each search sees every earlier key's edges; the default: larger
    /// batches cost recall on keys that drift along the sequence, docs/methods/retrieval_attention.md);
    /// the public code runs the searches in parallel with per-node locks, in an order that changes from
    /// run to run. The graph depends on the batch size, never on the thread count.
    int enhance_batch = 1;
    int threads = 0;     ///< OpenMP threads for step 3's searches; 0 = compute_threads()
};

struct RoarGraph {
    int n = 0, d = 0;
    int entry = 0;                                  ///< entry point (key nearest the mean key)
    std::vector<std::vector<int32_t>> projection;   ///< [n] lists after step 2, each <= M
    std::vector<std::vector<int32_t>> adj;          ///< [n] search adjacency after steps 3 and 5
    double build_distance_ops = 0;  ///< inner products computed during the build (kNN scan included)
    int repaired = 0;               ///< keys that needed a repair edge (step 5)
    double ms_knn = 0, ms_projection = 0, ms_enhance = 0, ms_repair = 0;  ///< wall time per build step
    size_t edges() const;
};

/// Builds the graph over keys [n, d] with training queries [m, d] (row-major float32). Throws
/// ParamError naming the parameter on n < 1, m < 1, nq < 1, M < 1, build_L < 1 or enhance_batch < 1.
/// Deterministic whatever the thread count: step 1's sgemm and step 3's batched searches run on
/// `threads`, everything else in one thread.
RoarGraph build_roargraph(const float* keys, int n, int d, const float* queries, int m,
                          const RoarGraphParams& p);

/// Exact top-nq keys by inner product for each query: out[m][<= nq], best first (ties: lower id).
std::vector<std::vector<int32_t>> exact_mips_knn(const float* keys, int n, int d, const float* queries,
                                                 int m, int nq);

/// Reusable per-thread search state.
struct GraphSearchScratch {
    struct Cand {
        float dist;
        int32_t id;
        bool expanded;
    };
    std::vector<Cand> queue;      ///< sorted by (dist, id), capacity L
    std::vector<uint32_t> stamp;  ///< visited marks
    std::vector<int32_t> fresh;   ///< one hop's unvisited neighbours
    uint32_t gen = 0;
};

struct GraphSearchStats {
    double distance_ops = 0;  ///< inner products with keys (the entry point included)
    int hops = 0;             ///< expanded nodes
};

/// Best-first beam search for q [d] over `adj` (one list per key): queue capacity max(L, k); writes the
/// best min(k, found) ids to `out`, best first. `expanded` (optional) receives the expanded nodes in
/// expansion order with their distances (-q.k). `exclude` (>= 0) is never inserted.
GraphSearchStats graph_search(const std::vector<std::vector<int32_t>>& adj, const float* keys, int d,
                              int entry, const float* q, int k, int L, std::vector<int32_t>& out,
                              GraphSearchScratch& s,
                              std::vector<GraphSearchScratch::Cand>* expanded = nullptr,
                              int exclude = -1);

/// Number of keys reachable from `entry` over `adj`.
int reachable_count(const std::vector<std::vector<int32_t>>& adj, int entry);

}  // namespace retro
