#pragma once
// The wave index of one (layer, KV head) as the `wave` method maintains it (RetroInfer §4.2; public code
// cache_hub/retroinfer_cache.py): the prompt outside the steady zone clustered at build time, every
// update_segment decode-time tokens older than the local window clustered as they age, the steady zone
// (sink + everything after the index), the zone budgets, and the Selection that a ranking of the
// clusters gives. Shared by the CPU method (lib/methods/wave.cpp, which ranks with BLAS) and the CUDA
// backend (kernels/run, which ranks on the GPU), so both select from the same index the same way.
// JSON-free: the RETRO_GPU_ONLY build compiles it.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "attention/cluster_rank.hpp"
#include "cluster/wave_index.hpp"
#include "methods/method.hpp"

namespace retro {

struct WaveParams {
    double tokens_per_cluster = 16;  ///< average tokens per cluster (k = round(n / 16))
    int segment = 8192;              ///< k-means segment (tokens); 0 = global
    int iters = 10;                  ///< k-means assignment passes
    double retrieval = 0.018;        ///< retrieval-zone budget: (0,1) fraction of clusters, >= 1 count
    double estimation = 0.232;       ///< estimation-zone budget: same convention; 0 = none
    int sink = 4;                    ///< steady zone: initial tokens
    int window = 64;                 ///< steady zone: local window of the prompt
    GroupRank gqa = GroupRank::sum;  ///< ranking of clusters for the GQA group
    bool center_keys = true;         ///< k-means on mean-centered keys
    FinalAssign final_assign = FinalAssign::probe;   ///< k-means final pass (public code: global)
    int final_radius = 1;            ///< local final pass: neighbour segments on either side
    int final_lists = 0;             ///< probe final pass: coarse lists over the centroids (0: sqrt(k))
    int final_probe = 4;             ///< probe final pass: lists each key is scored against
    bool normalize_init = false;     ///< k-means initial centroids L2-normalized (public code: raw keys)
    int update_segment = 1024;       ///< decode tokens clustered per index update; 0 = no updates
    unsigned seed = 0;               ///< k-means init offsets (0 = stride midpoints, the public code)
};

/// Clusters for a budget b over m clusters: 0 = none, (0,1) a fraction (retrieval: at least 1, as the
/// public code's max(round(m*b), 1); estimation: round(m*b)), >= 1 an absolute count; at most m.
int wave_clusters_for(double b, int m, bool at_least_one);

/// The k-means an index block is clustered with: x: [n, d] -> clusters. Default: segmented_kmeans (CPU).
using KMeansFn = std::function<KMeansResult(const float* x, int n, int d, const KMeansParams& p)>;

class WaveHead {
  public:
    WaveHead() = default;
    /// layer and kv_head enter the k-means seed when p.seed != 0 (as the method always did).
    WaveHead(const WaveParams& p, int layer, int kv_head, KMeansFn kmeans = {});

    /// Indexes the prompt: keys/values [prompt.n, d]. Tokens outside sink + window are clustered now when
    /// they are at least one update segment long; otherwise they wait in the steady zone.
    void build(const KVView& prompt);
    /// Decode token `pos` became visible (kv holds [0, pos]): every full update segment of tokens older
    /// than the window becomes new clusters. Returns true when the index grew.
    bool append(const KVView& kv, int pos);

    /// Retrieval (r) and estimation (e) clusters for the current index: r + e <= nonempty clusters.
    struct Zones {
        int r = 0, e = 0;
    };
    Zones zones() const;
    /// The same budgets without the cap by non-empty clusters: R = retrieval clusters of m, E = the
    /// estimation clusters of m, at most m - R. A ranking that puts empty clusters last gives every
    /// head's zones as ranked[0, r) and ranked[R, R + e) with r <= R, e <= E (the GPU's layout).
    Zones budget() const;

    /// Appends the steady zone at n visible tokens, ascending: [0, min(sink, n)) and [max(idx_end, sink), n).
    void steady_ids(int n, std::vector<int32_t>& out) const;
    int steady_tokens(int n) const;

    /// The wave method's Selection at n visible tokens for a GQA group of `group` heads, from `order`:
    /// non-empty cluster ids best first (at least zones().r + zones().e of them). Exact: the steady zone,
    /// then every member of order[0, r); estimated: order[r, r + e); scan_ops, h2d (the retrieved KV, no
    /// cache), d2h (int64 ids) and the retrieval clusters as fetch units in rank order.
    void fill_selection(std::span<const int> order, int n, int group, double kv_token_bytes,
                        Selection& out) const;

    /// Steady-zone KV + meta index (centroid, value sum, size per cluster in the KV dtype) on the GPU;
    /// a 12-byte descriptor per cluster on the CPU.
    Footprint footprint(int n, int head_dim, double elem_bytes) const;

    const WaveParams& params() const { return p_; }
    /// Another point's parameters for this built head: `p` may differ from the build's only in the
    /// search-time fields (retrieval, estimation, gqa: Wave's clone_built).
    void set_search_params(const WaveParams& p) { p_ = p; }
    const WaveIndex& index() const { return index_; }
    const std::vector<int>& nonempty() const { return nonempty_; }  ///< clusters with members, ascending
    int idx_end() const { return idx_end_; }  ///< the index holds tokens [sink, idx_end)

  private:
    KMeansParams kmeans_params() const;
    void add_block(const KVView& kv, int begin, int end, const KMeansParams& kp);

    WaveParams p_;
    int layer_ = 0, kv_head_ = 0;
    KMeansFn kmeans_;
    WaveIndex index_;
    std::vector<int> nonempty_;
    int idx_end_ = 0;
};

}  // namespace retro
