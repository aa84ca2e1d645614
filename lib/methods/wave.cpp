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
#include "core/serial_blas.hpp"
#include "core/error.hpp"
#include "methods/builtin_methods.hpp"

namespace retro {

namespace {

// The index, zones and Selection are WaveHead's (lib/methods/wave_head, shared with the CUDA backend);
// this method ranks the clusters on the CPU.
class Wave final : public Method {
  public:
    explicit Wave(WaveParams p) : p_(p) {}

    std::unique_ptr<Method> clone_built(const Method& fresh) const override {
        auto c = copy_built(*this, fresh, &Wave::p_);
        if (c) static_cast<Wave&>(*c).head_.set_search_params(static_cast<const Wave&>(fresh).p_);
        return c;
    }

    void build(const MethodContext& ctx, const KVView& prompt) override {
        ctx_ = ctx;
        head_ = WaveHead(p_, ctx.layer, ctx.kv_head);
        head_.build(prompt);
        n_ = prompt.n;
    }

    void append(const KVView& kv, int pos) override {
        n_ = pos + 1;
        head_.append(kv, pos);
    }

    void select(const float* q, int, const KVView& kv, Selection& out) override {
        const int d = kv.d, g = ctx_.group;
        n_ = kv.n;
        const WaveIndex& index = head_.index();
        const int m = index.num_clusters();
        const WaveHead::Zones z = head_.zones();
        order_.clear();
        if (m > 0 && z.r + z.e > 0) {
            // Rank clusters for the whole group by centroid scores: scores_ [g, m] = scale * Q C^T.
            scores_.resize((size_t)g * m);
            const SerialBlas serial;  // results independent of the thread count
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g, m, d, ctx_.scale, q, d,
                        index.centroids().data(), d, 0.0f, scores_.data(), m);
            group_cluster_weights(scores_.data(), g, m, head_.nonempty(), p_.gqa, agg_, w_);
            order_ = head_.nonempty();
            const int ne = (int)order_.size(), r = z.r, e = z.e;
            const auto better = [&](int a, int b) {
                return agg_[(size_t)a] > agg_[(size_t)b] || (agg_[(size_t)a] == agg_[(size_t)b] && a < b);
            };
            if (r + e < ne) std::nth_element(order_.begin(), order_.begin() + (r + e), order_.end(), better);
            if (r > 0 && r < r + e)
                std::nth_element(order_.begin(), order_.begin() + r, order_.begin() + (r + e), better);
            // retrieval zone in rank order: the GPU block cache admits misses in this order
            std::sort(order_.begin(), order_.begin() + r, better);
        }
        head_.fill_selection(order_, n_, g, ctx_.kv_token_bytes(), out);
    }

    Footprint footprint() const override {
        return head_.footprint(n_, ctx_.head_dim, (double)dtype_bytes(ctx_.storage));
    }

  private:
    WaveParams p_;
    MethodContext ctx_;
    WaveHead head_;
    int n_ = 0;  ///< tokens visible after the last build/append/select
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

WaveParams wave_params_from_json(const nlohmann::json& j) {
    WaveParams p;
    p.tokens_per_cluster = j.at("tokens_per_cluster").get<double>();
    p.segment = j.at("segment").get<int>();
    p.iters = j.at("iters").get<int>();
    p.retrieval = j.at("retrieval").get<double>();
    p.estimation = j.at("estimation").get<double>();
    p.sink = j.at("sink").get<int>();
    p.window = j.at("window").get<int>();
    const auto g = j.at("gqa").get<std::string>();
    p.gqa = g == "max" ? GroupRank::max : g == "mean" ? GroupRank::mean : GroupRank::sum;
    p.center_keys = j.at("center_keys").get<bool>();
    const auto fa = j.at("final_assign").get<std::string>();
    p.final_assign = fa == "global" ? FinalAssign::global
                     : fa == "none" ? FinalAssign::none
                     : fa == "probe" ? FinalAssign::probe
                                     : FinalAssign::local;
    p.final_radius = j.at("final_radius").get<int>();
    p.final_lists = j.at("final_lists").get<int>();
    p.final_probe = j.at("final_probe").get<int>();
    p.normalize_init = j.at("normalize_init").get<bool>();
    p.update_segment = j.at("update_segment").get<int>();
    p.seed = (unsigned)j.at("seed").get<long long>();
    return p;
}

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
        {"final_assign", ParamType::string, "probe",
         "k-means final assignment: global = against every centroid (n*k*d, quadratic), local = against "
         "the own segment's and final_radius neighbours' centroids (linear), probe = against the own "
         "segment's and those of the final_probe best of final_lists coarse lists over the centroids (an "
         "IVF; n*d*(L + final_probe*k/L)), none = own segment only",
         "global: public code segment_k_means (the faithful setting); probe (ours, issue 17) is the default "
         "on the numbers: within 0.1% of global's recall@100 and out_err on real keys, 8.7x faster at 1M "
         "(docs/performance.md); local, none: ours",
         -big, big, {"none", "global", "local", "probe"}},
        {"final_radius", ParamType::integer, 1,
         "final_assign local: segments on either side of a token's own segment it may move to",
         "ours (issue 17)", 0, big},
        {"final_lists", ParamType::integer, 0,
         "final_assign probe: coarse lists the centroids are clustered into; 0 = round(sqrt(clusters))",
         "ours (issue 17; sqrt: the usual IVF list count)", 0, big},
        {"final_probe", ParamType::integer, 4,
         "final_assign probe: coarse lists each token is scored against besides its own segment "
         "(>= final_lists: every centroid, the global pass)",
         "ours (issue 17)", 1, big},
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
    mark_search_params(m, {"retrieval", "estimation", "gqa"});
    m.check = check_wave;
    m.make = [](const nlohmann::json& j) { return std::make_unique<Wave>(wave_params_from_json(j)); };
    return m;
}

}  // namespace retro
