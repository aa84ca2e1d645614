// `wave`: RetroInfer's wave index (Chen et al., RetroInfer, §4.2), following the public code
// (microsoft/RetrievalAttention cache_hub/retroinfer_cache.py, kmeans.py). docs/methods/wave.md has the
// algorithm as built, the parameters with their sources, and every deviation.
#include "methods/wave.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "attention/attention.hpp"
#include "attention/cluster_rank.hpp"
#include "cluster/wave_index.hpp"
#include "core/error.hpp"

namespace retro {

namespace {

using GqaRank = GroupRank;  // lib/attention/cluster_rank (shared with the CUDA kernel's reference)

struct WaveParams {
    double tokens_per_cluster = 16;  ///< average tokens per cluster (k = round(n / 16))
    int segment = 8192;              ///< k-means segment (tokens); 0 = global
    int iters = 10;                  ///< k-means assignment passes
    double retrieval = 0.018;        ///< retrieval-zone budget: (0,1) fraction of clusters, >= 1 count
    double estimation = 0.232;       ///< estimation-zone budget: same convention; 0 = none
    int sink = 4;                    ///< steady zone: initial tokens
    int window = 64;                 ///< steady zone: local window of the prompt
    GqaRank gqa = GqaRank::sum;      ///< ranking of clusters for the GQA group
    bool center_keys = true;         ///< k-means on mean-centered keys
    bool final_global_assign = true; ///< k-means final assignment against every segment's centroids
    bool normalize_init = false;     ///< k-means initial centroids L2-normalized (public code: raw keys)
    int update_segment = 1024;       ///< decode tokens clustered per index update; 0 = no updates
    unsigned seed = 0;               ///< k-means init offsets (0 = stride midpoints, the public code)
};

// Clusters for a budget b over m clusters: 0 = none, (0,1) a fraction (retrieval: at least 1, as the
// public code's max(round(m*b), 1); estimation: round(m*b)), >= 1 an absolute count.
int clusters_for(double b, int m, bool at_least_one) {
    if (b <= 0 || m <= 0) return 0;
    if (b >= 1) return (int)std::min<long>(std::lround(b), m);
    long c = std::lround(b * m);
    if (at_least_one) c = std::max(1L, c);
    return (int)std::min<long>(c, m);
}

class Wave final : public Method {
  public:
    explicit Wave(WaveParams p) : p_(p) {}

    void build(const MethodContext& ctx, const KVView& prompt) override {
        ctx_ = ctx;
        index_ = WaveIndex(prompt.d);
        nonempty_.clear();
        n_ = prompt.n;
        idx_end_ = p_.sink;
        // The prompt outside the steady zone (sink + local window) is clustered now when it is at least
        // one update segment long (the public code's build_index_when_prefilling); otherwise it waits in
        // the steady zone for the first update.
        const int mid_end = prompt.n - p_.window;
        const int mid = mid_end - p_.sink;
        if (mid > 0 && mid >= std::max(1, p_.update_segment)) {
            KMeansParams kp = kmeans_params();
            kp.segment = p_.segment;
            add_block(prompt, p_.sink, mid_end, kp);
        }
    }

    void append(const KVView& kv, int pos) override {
        n_ = pos + 1;
        if (p_.update_segment <= 0) return;
        // Tokens older than the window (the current token excluded) that are not indexed yet: every
        // update_segment of them becomes new clusters (public code: _update_kv_cache).
        while ((pos - p_.window) - idx_end_ >= p_.update_segment) {
            KMeansParams kp = kmeans_params();
            kp.segment = 0;  // one segment per update
            kp.k = std::max(1, (int)std::lround(p_.update_segment / p_.tokens_per_cluster));
            add_block(kv, idx_end_, idx_end_ + p_.update_segment, kp);
        }
    }

    void select(const float* q, int, const KVView& kv, Selection& out) override {
        const int n = kv.n, d = kv.d, g = ctx_.group;
        n_ = n;
        auto& ids = out.shared();
        ids.clear();
        // Steady zone: sink tokens and everything after the index (local window + decode tokens).
        const int s_end = std::min(p_.sink, n);
        for (int i = 0; i < s_end; ++i) ids.push_back(i);
        for (int i = std::max(idx_end_, s_end); i < n; ++i) ids.push_back(i);

        const int m = index_.num_clusters();
        const int ne = (int)nonempty_.size();
        out.scan_ops = (double)m * g;
        out.h2d_bytes = 0;
        out.d2h_bytes = 0;
        if (m == 0) return;
        const int r = std::min(clusters_for(p_.retrieval, m, true), ne);
        const int e = std::min(clusters_for(p_.estimation, m, false), ne - r);
        if (r + e == 0) {
            out.scan_ops = 0;
            return;
        }

        // Rank clusters for the whole group by centroid scores: scores_ [g, m] = scale * Q C^T.
        scores_.resize((size_t)g * m);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g, m, d, ctx_.scale, q, d,
                    index_.centroids().data(), d, 0.0f, scores_.data(), m);
        group_cluster_weights(scores_.data(), g, m, nonempty_, p_.gqa, agg_, w_);
        order_ = nonempty_;
        const auto better = [&](int a, int b) {
            return agg_[(size_t)a] > agg_[(size_t)b] || (agg_[(size_t)a] == agg_[(size_t)b] && a < b);
        };
        if (r + e < ne) std::nth_element(order_.begin(), order_.begin() + (r + e), order_.end(), better);
        if (r > 0 && r < r + e)
            std::nth_element(order_.begin(), order_.begin() + r, order_.begin() + (r + e), better);
        // retrieval zone in rank order: the GPU block cache admits misses in this order
        std::sort(order_.begin(), order_.begin() + r, better);

        // Retrieval zone: every token of the top r clusters, exact.
        size_t retrieved = 0;
        for (int i = 0; i < r; ++i) {
            const auto mem = index_.members(order_[(size_t)i]);
            ids.insert(ids.end(), mem.begin(), mem.end());
            retrieved += mem.size();
        }
        // Estimation zone: the next e clusters from centroid, size and value sum (Eq. 2-4).
        out.estimated.reserve((size_t)e);
        for (int i = r; i < r + e; ++i) {
            const int c = order_[(size_t)i];
            out.estimated.push_back({index_.centroid(c), (double)index_.size(c), index_.value_sum(c)});
        }
        // Retrieval-zone KV comes from CPU memory (no GPU block cache yet); the cluster ids go the
        // other way to the CPU buffer manager (int64 each, as the public code's pinned copy).
        out.h2d_bytes = (double)retrieved * ctx_.kv_token_bytes();
        // transfer units for the system model's GPU block cache: the retrieval clusters, rank order
        for (int i = 0; i < r; ++i) {
            out.fetch_units.push_back(order_[(size_t)i]);
            out.fetch_unit_tokens.push_back(index_.size(order_[(size_t)i]));
        }
        out.d2h_bytes = (double)r * 8.0;
    }

    Footprint footprint() const override {
        const double el = (double)dtype_bytes(ctx_.storage);
        const int s_end = std::min(p_.sink, n_);
        const double steady = s_end + std::max(0, n_ - std::max(idx_end_, s_end));
        const double m = index_.num_clusters();
        Footprint f;
        // steady-zone KV + meta index (centroid, value sum, size per cluster, in the KV dtype as the
        // public code stores them)
        f.gpu_bytes = steady * ctx_.kv_token_bytes() + m * (2.0 * ctx_.head_dim + 1.0) * el;
        // CPU-side descriptor per cluster (start offset, size) for the reorganized KV blocks
        f.cpu_bytes = m * 12.0;
        return f;
    }

  private:
    KMeansParams kmeans_params() const {
        KMeansParams kp;
        kp.tokens_per_cluster = p_.tokens_per_cluster;
        kp.iters = p_.iters;
        kp.center = p_.center_keys;
        kp.final_global_assign = p_.final_global_assign;
        kp.normalize_init = p_.normalize_init;
        if (p_.seed != 0) {
            unsigned s = p_.seed * 2654435761u;
            s ^= (unsigned)ctx_.layer * 40503u + (unsigned)ctx_.kv_head * 9176u +
                 (unsigned)index_.blocks().size() * 65599u;
            kp.seed = s == 0 ? 1u : s;
        }
        return kp;
    }

    void add_block(const KVView& kv, int begin, int end, const KMeansParams& kp) {
        const WaveIndexBlock& b = index_.add_block(kv.keys, kv.values, kv.d, begin, end, kp);
        for (int c = b.cluster_begin; c < b.cluster_end; ++c)
            if (index_.size(c) > 0) nonempty_.push_back(c);
        idx_end_ = end;
    }

    WaveParams p_;
    MethodContext ctx_;
    WaveIndex index_;
    std::vector<int> nonempty_;  ///< clusters with members, ascending
    int idx_end_ = 0;            ///< the index holds tokens [sink, idx_end_)
    int n_ = 0;                  ///< tokens visible after the last build/append/select
    std::vector<float> scores_, agg_, w_;
    std::vector<int> order_;
};

void check_wave(const nlohmann::json& j) {
    const double tpc = j.at("tokens_per_cluster").get<double>();
    const long seg = j.at("segment").get<long>(), upd = j.at("update_segment").get<long>();
    if (seg != 0 && seg < tpc)
        throw ParamError("parameter 'segment' = " + std::to_string(seg) +
                         ": expected 0 (global k-means) or at least tokens_per_cluster (" +
                         j.at("tokens_per_cluster").dump() + ")");
    if (upd != 0 && upd < tpc)
        throw ParamError("parameter 'update_segment' = " + std::to_string(upd) +
                         ": expected 0 (no index updates) or at least tokens_per_cluster (" +
                         j.at("tokens_per_cluster").dump() + ")");
    const double r = j.at("retrieval").get<double>(), e = j.at("estimation").get<double>();
    if (r < 1 && e < 1 && r + e > 1)
        throw ParamError("parameters 'retrieval' + 'estimation' = " + std::to_string(r + e) +
                         ": the two zones are fractions of the same clusters and cannot exceed 1");
}

}  // namespace

MethodInfo wave_method_info() {
    MethodInfo m;
    m.name = "wave";
    m.description =
        "RetroInfer wave index: segmented spherical k-means; steady + retrieval (exact) + estimation "
        "(centroid) zones";
    m.paper = "Chen et al., RetroInfer: A Vector-Storage Approach for Scalable Long-Context LLM "
              "Inference (2025)";
    const double big = 1e9;
    m.params = {
        {"tokens_per_cluster", ParamType::number, 16,
         "average tokens per cluster: k = round(tokens / tokens_per_cluster)",
         "RetroInfer §5 (one centroid per 16 tokens); public config avg_cluster_size = 16", 1, big},
        {"segment", ParamType::integer, 8192,
         "k-means segment length in tokens; 0 or >= clustered tokens = global k-means",
         "RetroInfer §5 (8K segments); public generate_config n_segments = round(len / 8192)", 0, big},
        {"iters", ParamType::integer, 10,
         "k-means assignment passes (iters-1 spherical within segments + the final assignment)",
         "RetroInfer §5 (10 iterations); public segment_k_means num_iters = 10", 1, 1000},
        {"retrieval", ParamType::number, 0.018,
         "retrieval-zone budget in clusters (all tokens exact): (0,1) fraction of the clusters (at "
         "least 1), >= 1 a count, 0 none",
         "RetroInfer §5 (1.8%); public config retrieval_budget = 0.018", 0, big},
        {"estimation", ParamType::number, 0.232,
         "estimation-zone budget in clusters (centroid estimate, Eq. 2-4): (0,1) fraction of the "
         "clusters, >= 1 a count, 0 none",
         "RetroInfer §5 (23.2%); public config estimation_budget = 0.232", 0, big},
        {"sink", ParamType::integer, 4, "steady zone: initial (attention-sink) tokens",
         "RetroInfer §5 (4+64); public config static_pattern_start = 4", 0, big},
        {"window", ParamType::integer, 64,
         "steady zone: last prompt tokens kept exact (decode tokens join the steady zone until "
         "clustered)",
         "RetroInfer §5 (4+64); public config static_pattern_end = 64", 0, big},
        {"gqa", ParamType::string, "sum",
         "cluster ranking for the query-head group: sum|max over the group of softmax(q.C/sqrt(d)), "
         "or mean of the logits q.C/sqrt(d)",
         "public code sparse_attention (sum of softmax); max|mean ours", -big, big,
         {"sum", "max", "mean"}},
        {"center_keys", ParamType::boolean, true, "k-means on keys minus their mean (added back)",
         "RetroInfer §4.2 centering; public code prefill_update_kv_cache (mean_key)"},
        {"final_global_assign", ParamType::boolean, true,
         "k-means final assignment against the centroids of every segment (false: own segment only)",
         "public code segment_k_means (final pass over all centroids); the paper does not say"},
        {"normalize_init", ParamType::boolean, false,
         "k-means: L2-normalize the initial centroids (false: the first assignment scores the raw "
         "initial keys, as the public code)",
         "public segment_k_means (false); FAISS spherical k-means normalizes (true)"},
        {"update_segment", ParamType::integer, 1024,
         "decode-time index update: every update_segment tokens beyond the window become new "
         "clusters; 0 = never",
         "RetroInfer §4.2 (1K update segment); public code UPDATE_SEGMENT = 1024", 0, big},
        {"seed", ParamType::integer, 0,
         "k-means init: 0 = evenly spaced tokens (public code), else seeded offsets in each stride",
         "ours", 0, 4294967295.0},
    };
    m.check = check_wave;
    m.make = [](const nlohmann::json& j) {
        WaveParams p;
        p.tokens_per_cluster = j.at("tokens_per_cluster").get<double>();
        p.segment = j.at("segment").get<int>();
        p.iters = j.at("iters").get<int>();
        p.retrieval = j.at("retrieval").get<double>();
        p.estimation = j.at("estimation").get<double>();
        p.sink = j.at("sink").get<int>();
        p.window = j.at("window").get<int>();
        const auto g = j.at("gqa").get<std::string>();
        p.gqa = g == "max" ? GqaRank::max : g == "mean" ? GqaRank::mean : GqaRank::sum;
        p.center_keys = j.at("center_keys").get<bool>();
        p.final_global_assign = j.at("final_global_assign").get<bool>();
        p.normalize_init = j.at("normalize_init").get<bool>();
        p.update_segment = j.at("update_segment").get<int>();
        p.seed = (unsigned)j.at("seed").get<long long>();
        return std::make_unique<Wave>(p);
    };
    return m;
}

}  // namespace retro
