// `ctkvr`: CTKVR's centroid-then-token retrieval. The last C prefill queries of each query head are
// the centroids; each centroid position keeps the top-rho keys of its attention (max over the GQA
// group) as an inverted list (qcIVF); at decode the C' centroids most similar to the query (cosine, max
// over the group) are recalled, their lists merged without duplicates and reranked by exact attention
// (max over the group) down to rho'. docs/methods/ctkvr.md.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "attention/attention.hpp"
#include "cluster/roargraph.hpp"  // dot_f32
#include "core/error.hpp"
#include "core/top_k.hpp"
#include "methods/builtin_methods.hpp"

namespace retro {

namespace {
struct CtkvrParams {
    int C = 1024;             ///< centroids (last prefill queries); 0 = min(2048, prompt_len / 16)
    int C_prime = 4;          ///< centroids recalled per step
    double rho_prime = 1024;  ///< budget: tokens kept after rerank
    double rho_factor = 2.5;  ///< rho = round(rho_factor * rho') when rho == 0
    int rho = 0;              ///< list length per centroid; 0 = rho_factor * rho'
    int sink = 128;           ///< static initial tokens (GPU)
    int window = 512;         ///< static last prompt tokens (GPU); decode tokens stay on the GPU
    bool dynamic_update = false;  ///< DCU: FIFO-push the current query's list, evicting the oldest
};

/// Centroids a head with a `P`-token prompt uses (the prefill queries it needs per query head), or 0
/// when sink and window cover the whole prompt (no index). Shared by build() and the check before work.
int centroids_needed(const CtkvrParams& p, int P) {
    const int ib = std::min(p.sink, P), ie = std::max(ib, P - p.window);
    if (ie - ib <= 0) return 0;
    return p.C > 0 ? p.C : std::max(1, std::min(2048, P / 16));
}

void check_prefill(const CtkvrParams& p, int C, int npf) {
    if (npf < C)
        throw ParamError("ctkvr: parameter 'C' = " + std::to_string(C) + " needs " + std::to_string(C) +
                         " prefill queries per query head; the trace has " + std::to_string(npf) +
                         " (regenerate it with more prefill queries, or lower C)");
    if (p.C_prime > C)
        throw ParamError("ctkvr: parameter 'C_prime' = " + std::to_string(p.C_prime) +
                         " exceeds the number of centroids C = " + std::to_string(C));
}

void normalize(float* x, int d) {
    double s = 0;
    for (int e = 0; e < d; ++e) s += (double)x[e] * x[e];
    const float inv = s > 0 ? (float)(1.0 / std::sqrt(s)) : 0.0f;
    for (int e = 0; e < d; ++e) x[e] *= inv;
}

class Ctkvr final : public Method {
  public:
    explicit Ctkvr(CtkvrParams p) : p_(p) {}

    void build(const MethodContext& ctx, const KVView& prompt) override {
        ctx_ = ctx;
        const int P = prompt.n, d = prompt.d, g = ctx.group;
        ib_ = std::min(p_.sink, P);
        ie_ = std::max(ib_, P - p_.window);
        n_seen_ = P;
        lists_.clear();
        cent_.clear();
        next_slot_ = 0;
        const int ni = ie_ - ib_;
        if (ni <= 0) return;
        C_ = centroids_needed(p_, P);
        const HeadSlice* s = ctx.slice;
        const int npf = s ? s->num_prefill : 0;
        check_prefill(p_, C_, npf);
        rho_ = p_.rho > 0 ? p_.rho
                          : std::max(1, (int)std::lround(p_.rho_factor * resolve_budget(p_.rho_prime, P)));
        rho_ = std::min(rho_, ni);

        // Centroids: last C prefill queries of each query head, L2-normalized (cosine), [C][g][d].
        const int first = npf - C_;
        cent_.assign((size_t)C_ * g * d, 0.0f);
        for (int c = 0; c < C_; ++c)
            for (int h = 0; h < g; ++h) {
                float* dst = cent_.data() + ((size_t)c * g + h) * d;
                std::copy(s->prefill_query(h, first + c), s->prefill_query(h, first + c) + d, dst);
                normalize(dst, d);
            }

        // qcIVF: per centroid position, top-rho index keys of max_h softmax(q_h,c . K / sqrt(d)), causal.
        lists_.assign((size_t)C_, {});
        const float* keys = prompt.keys + (size_t)ib_ * d;
        // B centroid positions per block, all g query heads of a block in one sgemm (B * g ~ 256 rows): the
        // keys are packed once per block instead of once per head (32 rows per call spent more time
        // packing the keys than multiplying; each score is the same k-ordered sum either way).
        const int B = std::max(1, 256 / g);
        std::vector<float> sc((size_t)B * g * ni), mx((size_t)B * ni), qb((size_t)B * g * d);
        TopKScratch topk;
        for (int c0 = 0; c0 < C_; c0 += B) {
            const int rows = std::min(B, C_ - c0);
            for (int h = 0; h < g; ++h)
                for (int r = 0; r < rows; ++r)
                    std::copy(s->prefill_query(h, first + c0 + r), s->prefill_query(h, first + c0 + r) + d,
                              qb.begin() + (ptrdiff_t)((size_t)h * rows + r) * d);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows * g, ni, d, ctx.scale, qb.data(), d, keys, d,
                        0.0f, sc.data(), ni);
            for (int r = 0; r < rows; ++r) {
                const int pos = s->prefill_first_position + first + c0 + r;
                const int vis = std::clamp(pos + 1 - ib_, 0, ni);  // causal: keys at positions <= pos
                float* m = mx.data() + (size_t)r * ni;
                std::fill(m, m + vis, 0.0f);
                for (int h = 0; h < g; ++h) {
                    float* row = sc.data() + ((size_t)h * rows + r) * ni;
                    if (vis > 0) softmax_inplace(row, vis);
                    for (int i = 0; i < vis; ++i) m[i] = std::max(m[i], row[i]);
                }
                top_k_into(m, vis, rho_, lists_[(size_t)(c0 + r)], topk);
            }
        }
        stamp_.assign((size_t)ni, 0);
        gen_ = 0;
    }

    void append(const KVView&, int pos) override { n_seen_ = pos + 1; }

    void select(const float* q, int, const KVView& kv, Selection& out) override {
        const int n = kv.n, d = kv.d, g = ctx_.group;
        n_seen_ = n;
        auto& ids = out.shared();
        ids.clear();
        for (int i = 0; i < std::min(ib_, n); ++i) ids.push_back(i);
        for (int i = std::max(ie_, ib_); i < n; ++i) ids.push_back(i);
        out.d2h_bytes = out.h2d_bytes = out.scan_ops = 0;
        if (lists_.empty()) return;
        const double act = (double)dtype_bytes(ctx_.storage);

        // (b) Q2Q recall: cosine with every centroid, max over the group; top C'.
        qn_.assign(q, q + (size_t)g * d);
        for (int h = 0; h < g; ++h) normalize(qn_.data() + (size_t)h * d, d);
        cos_.assign((size_t)C_, -2.0f);
        for (int c = 0; c < C_; ++c)
            for (int h = 0; h < g; ++h)
                cos_[(size_t)c] = std::max(cos_[(size_t)c], dot_f32(qn_.data() + (size_t)h * d,
                                                                    cent_.data() + ((size_t)c * g + h) * d, d));
        top_k_into(cos_.data(), C_, p_.C_prime, chosen_, topk_);

        // Union of the chosen lists, deduplicated.
        if (++gen_ == 0) std::fill(stamp_.begin(), stamp_.end(), 0), gen_ = 1;
        recalled_.clear();
        for (int32_t c : chosen_) {
            for (int32_t i : lists_[(size_t)c])
                if (stamp_[(size_t)i] != gen_) stamp_[(size_t)i] = gen_, recalled_.push_back(i);
        }
        const int U = (int)recalled_.size();

        // (c) Q2K rerank: max over the group of softmax over the recalled keys; keep rho'.
        agg_.assign((size_t)U, 0.0f);
        sc_.resize((size_t)U);
        const float* keys = kv.keys + (size_t)ib_ * d;
        for (int h = 0; h < g; ++h) {
            attention_scores_ids(q + (size_t)h * d, keys, recalled_, d, ctx_.scale, sc_.data());
            if (U > 0) softmax_inplace(sc_.data(), U);
            for (int j = 0; j < U; ++j) agg_[(size_t)j] = std::max(agg_[(size_t)j], sc_[(size_t)j]);
        }
        const int keep = std::min(resolve_budget(p_.rho_prime, n), U);
        top_k_into(agg_.data(), U, keep, kept_, topk_);
        for (int32_t j : kept_) ids.push_back(ib_ + recalled_[(size_t)j]);

        // Work: g*C centroid cosines + g*U rerank scores (the dedup coefficient is U / (C' rho)).
        out.scan_ops = (double)g * C_ + (double)g * U;
        // Recall indices and the queries go to the CPU; partial outputs + LSE come back. No KV moves.
        out.d2h_bytes = (double)U * 4.0 + (double)g * d * act;
        out.h2d_bytes = (double)g * (d * act + 4.0);

        // (d) Dynamic centroid update: the current queries become a centroid whose list is the top-rho
        // reranked keys, replacing the oldest centroid (FIFO of capacity C).
        if (p_.dynamic_update) {
            const size_t slot = (size_t)(next_slot_++ % C_);
            std::copy(qn_.begin(), qn_.end(), cent_.begin() + (ptrdiff_t)(slot * g * d));
            top_k_into(agg_.data(), U, rho_, kept_, topk_);
            auto& l = lists_[slot];
            l.clear();
            for (int32_t j : kept_) l.push_back(recalled_[(size_t)j]);
        }
    }

    Footprint footprint() const override {
        const double static_tokens = (double)ib_ + std::max(0, n_seen_ - ie_);
        double list_entries = 0;
        for (const auto& l : lists_) list_entries += (double)l.size();
        const double act = (double)dtype_bytes(ctx_.storage);
        // GPU: static KV, the centroids and the int32 lists (the dedup/gather kernel runs on the GPU).
        return {static_tokens * ctx_.kv_token_bytes() + (double)cent_.size() * act + list_entries * 4.0, 0.0};
    }

  private:
    CtkvrParams p_;
    MethodContext ctx_;
    int ib_ = 0, ie_ = 0, n_seen_ = 0, C_ = 0, rho_ = 0;
    std::vector<float> cent_;                  ///< [C][g][d] normalized centroids
    std::vector<std::vector<int32_t>> lists_;  ///< [C] key ids relative to ib_
    long next_slot_ = 0;
    std::vector<uint32_t> stamp_;
    uint32_t gen_ = 0;
    std::vector<float> qn_, cos_, agg_, sc_;
    std::vector<int32_t> chosen_, recalled_, kept_;
    TopKScratch topk_;
};

CtkvrParams ctkvr_params(const nlohmann::json& j) {
    CtkvrParams p;
    p.C = j.at("C").get<int>();
    p.C_prime = j.at("C_prime").get<int>();
    p.rho_prime = j.at("rho_prime").get<double>();
    p.rho_factor = j.at("rho_factor").get<double>();
    p.rho = j.at("rho").get<int>();
    p.sink = j.at("sink").get<int>();
    p.window = j.at("window").get<int>();
    p.dynamic_update = j.at("dynamic_update").get<bool>();
    return p;
}
}  // namespace

MethodInfo ctkvr_method_info() {
    MethodInfo m;
    m.name = "ctkvr";
    m.description = "CTKVR: last-C prefill queries as centroids with top-rho key lists; recall C', rerank to rho'";
    m.paper = "CTKVR: KV cache retrieval for long-context LLMs via centroid then token indexing (2025)";
    m.params = {
        {"C", ParamType::integer, 1024,
         "centroids = the last C prefill queries of each query head; 0 = min(2048, prompt_len/16)",
         "CTKVR App. C.2 (C = 1024); §4.1.1 gives min(2048, len/16)", 0, 1e7},
        {"C_prime", ParamType::integer, 4, "centroids recalled per decode step (cosine, max over the group)",
         "CTKVR §4.1.1 (C' = 4)", 1, 1e7},
        {"rho_prime", ParamType::number, 1024,
         "token budget kept after rerank: >= 1 tokens, in (0,1) a fraction of visible tokens",
         "CTKVR §4.1.1 (rho' = 1024 or 512)", 1e-9, 1e9},
        {"rho_factor", ParamType::number, 2.5, "list length rho = rho_factor * rho' (when rho = 0)",
         "CTKVR §4.1.1 (rho = 2.5 rho')", 1e-9, 1e6},
        {"rho", ParamType::integer, 0, "list length per centroid; 0 = rho_factor * rho'", "ours", 0, 1e9},
        {"sink", ParamType::integer, 128, "static initial tokens kept on the GPU",
         "the paper gives none; RetrievalAttention's 128", 0, 1e9},
        {"window", ParamType::integer, 512,
         "static last prompt tokens kept on the GPU (decode tokens stay on the GPU too)",
         "the paper gives none; RetrievalAttention's 512", 0, 1e9},
        {"dynamic_update", ParamType::boolean, false,
         "dynamic centroid update: each step's queries and top-rho reranked keys replace the oldest centroid",
         "CTKVR §3 (DCU)", -1e300, 1e300},
    };
    m.check = [](const nlohmann::json& j) {
        const long C = j.at("C").get<long>(), cp = j.at("C_prime").get<long>();
        if (C > 0 && cp > C)
            throw ParamError("parameter 'C_prime' = " + std::to_string(cp) + " exceeds 'C' = " + std::to_string(C));
    };
    m.check_trace = [](const nlohmann::json& j, const TraceInfo& t) {
        const CtkvrParams p = ctkvr_params(j);
        if (const int C = centroids_needed(p, t.prompt_len)) check_prefill(p, C, t.num_prefill_queries);
    };
    m.index_bytes = [](const nlohmann::json& j, const TraceInfo& t) {
        // build(): score and max buffers [32, P], normalized centroids [C, group, d], lists [C, rho] int32
        const CtkvrParams p = ctkvr_params(j);
        const double P = t.prompt_len, C = centroids_needed(p, t.prompt_len);
        const double rho = p.rho > 0 ? p.rho : p.rho_factor * resolve_budget(p.rho_prime, t.prompt_len);
        return 2.0 * 32 * P * 4 + C * t.group_size() * t.head_dim * 4.0 + C * std::min(rho, P) * 4.0 + P * 4.0;
    };
    m.make = [](const nlohmann::json& j) { return std::make_unique<Ctkvr>(ctkvr_params(j)); };
    return m;
}

}  // namespace retro
