// `retrieval_attention`: RetrievalAttention's attention-aware ANNS index (a RoarGraph over the
// offloaded keys, trained with the prefill queries) plus a static sink + window pattern on the GPU.
// docs/methods/retrieval_attention.md.
#include <algorithm>
#include <memory>
#include <string>

#include "cluster/roargraph.hpp"
#include "core/error.hpp"
#include "methods/builtin_methods.hpp"

namespace retro {

namespace {
struct RaParams {
    double k = 100;         ///< budget: tokens retrieved per query head
    int search_L = 200;     ///< decode beam-search queue (effective max(search_L, k))
    int sink = 128;         ///< static initial tokens (GPU)
    int window = 512;       ///< static last prompt tokens (GPU); decode tokens also stay on the GPU
    RoarGraphParams graph;  ///< nq, M, build_L, enhance, enhance_batch, repair
    bool per_query_head = false;  ///< one graph per query head (the paper) instead of per KV head
    int train_queries = 0;  ///< last prefill queries per query head used for training; 0 = all
};

/// The graph is trained on prefill queries: a head with prompt tokens to index needs some.
void check_prefill(int num_prefill) {
    if (num_prefill <= 0)
        throw ParamError("retrieval_attention: the trace has no prefill queries (the graph is trained "
                         "on them); regenerate it with prefill queries (synth --prefill-queries N)");
}

class RetrievalAttention final : public Method {
  public:
    explicit RetrievalAttention(RaParams p) : p_(p) {}

    std::unique_ptr<Method> clone_built(const Method& fresh) const override {
        return copy_built(*this, fresh, &RetrievalAttention::p_);
    }

    void build(const MethodContext& ctx, const KVView& prompt) override {
        ctx_ = ctx;
        const int d = prompt.d, g = ctx.group;
        ib_ = std::min(p_.sink, prompt.n);
        ie_ = std::max(ib_, prompt.n - p_.window);
        n_seen_ = prompt.n;
        graphs_.clear();
        const int ni = ie_ - ib_;
        if (ni <= 0) return;
        const HeadSlice* s = ctx.slice;
        check_prefill(s ? s->num_prefill : 0);
        const int T = p_.train_queries > 0 ? std::min(p_.train_queries, s->num_prefill) : s->num_prefill;
        const int first = s->num_prefill - T;
        const float* keys = prompt.keys + (size_t)ib_ * d;
        auto rows = [&](int h0, int h1) {
            std::vector<float> q((size_t)(h1 - h0) * T * d);
            for (int h = h0; h < h1; ++h)
                std::copy(s->prefill_query(h, first), s->prefill_query(h, first) + (size_t)T * d,
                          q.begin() + (ptrdiff_t)((size_t)(h - h0) * T * d));
            return q;
        };
        if (p_.per_query_head) {
            for (int h = 0; h < g; ++h) {
                const auto q = rows(h, h + 1);
                graphs_.push_back(build_roargraph(keys, ni, d, q.data(), T, p_.graph));
            }
        } else {
            const auto q = rows(0, g);
            graphs_.push_back(build_roargraph(keys, ni, d, q.data(), g * T, p_.graph));
        }
    }

    void append(const KVView&, int pos) override { n_seen_ = pos + 1; }

    void select(const float* q, int, const KVView& kv, Selection& out) override {
        const int n = kv.n, d = kv.d, g = ctx_.group;
        n_seen_ = n;
        out.exact.resize((size_t)g);
        const int k = std::min(resolve_budget(p_.k, n), ie_ - ib_);
        double ops = 0;
        for (int h = 0; h < g; ++h) {
            auto& ids = out.exact[(size_t)h];
            ids.clear();
            for (int i = 0; i < std::min(ib_, n); ++i) ids.push_back(i);
            for (int i = std::max(ie_, ib_); i < n; ++i) ids.push_back(i);
            if (graphs_.empty() || k <= 0) continue;
            const RoarGraph& G = graphs_[p_.per_query_head ? (size_t)h : 0];
            const auto st = graph_search(G.adj, kv.keys + (size_t)ib_ * d, d, G.entry, q + (size_t)h * d, k,
                                         std::max(p_.search_L, k), found_, scratch_);
            ops += st.distance_ops;
            for (int32_t i : found_) ids.push_back(ib_ + i);
        }
        out.scan_ops = ops;
        // CPU attention on the retrieved tokens: the queries go to the CPU, partial outputs + LSE come
        // back; no KV crosses PCIe (static tokens and decode tokens live on the GPU).
        const double act = (double)dtype_bytes(ctx_.storage);
        out.d2h_bytes = (double)g * d * act;
        out.h2d_bytes = (double)g * (d * act + 4.0);
    }

    Footprint footprint() const override {
        const double static_tokens = (double)ib_ + std::max(0, n_seen_ - ie_);
        double edges = 0;
        for (const auto& G : graphs_) edges += (double)G.edges();
        return {static_tokens * ctx_.kv_token_bytes(), edges * 4.0};
    }

  private:
    RaParams p_;
    MethodContext ctx_;
    int ib_ = 0, ie_ = 0, n_seen_ = 0;  // index over prompt tokens [ib_, ie_)
    std::vector<RoarGraph> graphs_;
    GraphSearchScratch scratch_;
    std::vector<int32_t> found_;
};
}  // namespace

MethodInfo retrieval_attention_method_info() {
    MethodInfo m;
    m.name = "retrieval_attention";
    m.description =
        "RetrievalAttention: RoarGraph index trained on prefill queries (CPU) + static sink/window (GPU)";
    m.paper = "Liu et al., RetrievalAttention: Accelerating Long-Context LLM Inference via Vector Retrieval "
              "(2024); graph: Chen et al., RoarGraph (VLDB 2024)";
    m.params = {
        {"k", ParamType::number, 100,
         "token budget retrieved per query head: >= 1 tokens, in (0,1) a fraction of visible tokens",
         "RetrievalAttention §5: top-100 (top-2000 for Retr.KV)", 1e-9, 1e9},
        {"search_L", ParamType::integer, 200,
         "decode beam-search queue size (the effective queue is max(search_L, k)); swept",
         "ours (RoarGraph sweeps L_pq 10..2000; the paper gives none)", 1, 1e9},
        {"sink", ParamType::integer, 128, "static initial tokens kept on the GPU",
         "RetrievalAttention §3.3: 640 = 128 initial + 512 window", 0, 1e9},
        {"window", ParamType::integer, 512,
         "static last prompt tokens kept on the GPU (decode tokens stay on the GPU too)",
         "RetrievalAttention §3.3: 640 = 128 initial + 512 window", 0, 1e9},
        {"nq", ParamType::integer, 100, "N_q: exact top keys per training query (bipartite edges)",
         "RoarGraph README --M_sq 100 (the paper gives none)", 1, 1e9},
        {"M", ParamType::integer, 35, "max out-degree of the projected graph",
         "RoarGraph README --M_pjbp 35 (the paper gives none)", 1, 1e6},
        {"build_L", ParamType::integer, 500, "beam-search queue of the connectivity enhancement",
         "RoarGraph README --L_pjpq 500 (the paper gives none)", 1, 1e9},
        {"enhance", ParamType::boolean, true, "run RoarGraph's connectivity enhancement", "RoarGraph code",
         -1e300, 1e300},
        {"enhance_batch", ParamType::integer, 1,
         "keys whose enhancement searches run in parallel over the graph as it stood before them: 1 = the "
         "serial order (each search sees every earlier key's edges), > 1 faster on several cores but a "
         "search misses its batch's edges (recall@100 0.995 -> 0.977 at 8, 0.854 at 256 on a 128K head); "
         "the graph never depends on the thread count",
         "ours: 1 is the algorithm's order; the public code searches in parallel with per-node locks, in a "
         "run-dependent order", 1, 1e9},
        {"repair", ParamType::boolean, true,
         "link keys unreachable from the entry point (NSG-style), so the graph is connected", "ours", -1e300,
         1e300},
        {"index", ParamType::string, "kv_head",
         "kv_head: one graph per KV head trained on all queries of its group; query_head: one graph per "
         "query head (the paper)",
         "RetrievalAttention §3.2 builds per query head; kv_head is ours", -1e300, 1e300,
         {"kv_head", "query_head"}},
        {"train_queries", ParamType::integer, 0,
         "last prefill queries per query head used as training queries; 0 = all in the trace",
         "the paper uses all prefill queries", 0, 1e9},
    };
    mark_search_params(m, {"k", "search_L"});
    m.check_trace = [](const nlohmann::json& j, const TraceInfo& t) {
        // build() needs prefill queries only when sink and window leave prompt tokens to index
        const int P = t.prompt_len, ib = std::min(j.at("sink").get<int>(), P);
        if (std::max(ib, P - j.at("window").get<int>()) > ib) check_prefill(t.num_prefill_queries);
    };
    m.make = [](const nlohmann::json& j) {
        RaParams p;
        p.k = j.at("k").get<double>();
        p.search_L = j.at("search_L").get<int>();
        p.sink = j.at("sink").get<int>();
        p.window = j.at("window").get<int>();
        p.graph.nq = j.at("nq").get<int>();
        p.graph.M = j.at("M").get<int>();
        p.graph.build_L = j.at("build_L").get<int>();
        p.graph.enhance = j.at("enhance").get<bool>();
        p.graph.enhance_batch = j.at("enhance_batch").get<int>();
        p.graph.repair = j.at("repair").get<bool>();
        p.per_query_head = j.at("index").get<std::string>() == "query_head";
        p.train_queries = j.at("train_queries").get<int>();
        return std::make_unique<RetrievalAttention>(p);
    };
    return m;
}

}  // namespace retro
