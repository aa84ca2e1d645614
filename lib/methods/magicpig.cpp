// `magicpig`: MagicPIG's LSH sampling. Offloaded keys are mean-centered and SimHashed into L tables of K
// bits; a token is sampled for a query head when it shares the query's bucket in at least 2 tables, and
// attention over the samples is importance-weighted by 1 / (its sampling probability), LSE-merged with
// exact attention over the static sink + local + decode tokens. docs/methods/magicpig.md.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "cluster/roargraph.hpp"  // dot_f32
#include "cluster/simhash.hpp"
#include "core/error.hpp"
#include "methods/builtin_methods.hpp"

namespace retro {

namespace {
struct MagicPigParams {
    SimHashParams hash;      ///< K bits per table, L tables, seed (mixed with the head's seed)
    int min_collisions = 2;  ///< tables a token must share with the query to be sampled
    int sink = 4;            ///< static initial tokens (GPU)
    int window = 64;         ///< static last prompt tokens (GPU); decode tokens stay on the GPU
};

class MagicPig final : public Method {
  public:
    explicit MagicPig(MagicPigParams p) : p_(p) {}

    void build(const MethodContext& ctx, const KVView& prompt) override {
        ctx_ = ctx;
        const int P = prompt.n, d = prompt.d;
        ib_ = std::min(p_.sink, P);
        ie_ = std::max(ib_, P - p_.window);
        n_seen_ = P;
        const int ni = ie_ - ib_;
        mean_.assign((size_t)d, 0.0f);
        centered_.clear();
        norm_.clear();
        if (ni <= 0) return;
        std::vector<double> m((size_t)d, 0.0);
        for (int i = ib_; i < ie_; ++i)
            for (int e = 0; e < d; ++e) m[(size_t)e] += prompt.key(i)[e];
        for (int e = 0; e < d; ++e) mean_[(size_t)e] = (float)(m[(size_t)e] / ni);
        centered_.resize((size_t)ni * d);
        norm_.resize((size_t)ni);
        for (int i = 0; i < ni; ++i) {
            float* c = centered_.data() + (size_t)i * d;
            for (int e = 0; e < d; ++e) c[e] = prompt.key(ib_ + i)[e] - mean_[(size_t)e];
            norm_[(size_t)i] = std::sqrt(dot_f32(c, c, d));
        }
        SimHashParams hp = p_.hash;
        hp.seed = p_.hash.seed * 0x100000001b3ULL + ctx.seed + 1000003ULL * (uint64_t)(ctx.layer * 4096 + ctx.kv_head);
        tables_.build(centered_.data(), ni, d, hp);
        count_.assign((size_t)ni, 0u);
        qcodes_.resize((size_t)hp.L);
    }

    void append(const KVView&, int pos) override { n_seen_ = pos + 1; }

    void select(const float* q, int, const KVView& kv, Selection& out) override {
        const int n = kv.n, d = kv.d, g = ctx_.group;
        n_seen_ = n;
        out.exact.resize((size_t)g);
        out.exact_log_weight.resize((size_t)g);
        for (int h = 0; h < g; ++h) {
            auto& ids = out.exact[(size_t)h];
            auto& lw = out.exact_log_weight[(size_t)h];
            ids.clear();
            lw.clear();
            for (int i = 0; i < std::min(ib_, n); ++i) ids.push_back(i);
            for (int i = std::max(ie_, ib_); i < n; ++i) ids.push_back(i);
            lw.assign(ids.size(), 0.0f);
            if (centered_.empty()) continue;
            const float* qh = q + (size_t)h * d;
            tables_.codes(qh, qcodes_.data());
            touched_.clear();
            tables_.collide(qcodes_.data(), count_, touched_);
            const float qn = std::sqrt(dot_f32(qh, qh, d));
            std::sort(touched_.begin(), touched_.end());
            for (int32_t i : touched_) {
                const uint32_t c = count_[(size_t)i];
                count_[(size_t)i] = 0;
                if ((int)c < p_.min_collisions) continue;
                const float kn = norm_[(size_t)i];
                const double cosv =
                    qn > 0 && kn > 0 ? dot_f32(qh, centered_.data() + (size_t)i * d, d) / ((double)qn * kn) : 0.0;
                const double prob = simhash_sample_probability(cosv, p_.hash.K, p_.hash.L, p_.min_collisions);
                ids.push_back(ib_ + i);
                lw.push_back((float)-std::log(std::max(prob, 1e-300)));
            }
        }
        // Work: each query head projects onto K*L hyperplanes (bucket walks are integer work, not counted).
        out.scan_ops = (double)g * p_.hash.K * p_.hash.L;
        // The queries and their L hash codes (int32) go to the CPU; partial outputs + LSE come back.
        const double act = (double)dtype_bytes(ctx_.storage);
        out.d2h_bytes = (double)g * (d * act + p_.hash.L * 4.0);
        out.h2d_bytes = (double)g * (d * act + 4.0);
    }

    Footprint footprint() const override {
        const double static_tokens = (double)ib_ + std::max(0, n_seen_ - ie_);
        const double act = (double)dtype_bytes(ctx_.storage);
        const double planes = (double)ctx_.head_dim * p_.hash.K * p_.hash.L * act;
        return {static_tokens * ctx_.kv_token_bytes() + planes,
                centered_.empty() ? 0.0 : tables_.table_bytes() + (double)norm_.size() * 4.0};
    }

  private:
    MagicPigParams p_;
    MethodContext ctx_;
    int ib_ = 0, ie_ = 0, n_seen_ = 0;
    std::vector<float> mean_, centered_, norm_;
    SimHashTables tables_;
    std::vector<uint32_t> count_, qcodes_;
    std::vector<int32_t> touched_;
};
}  // namespace

MethodInfo magicpig_method_info() {
    MethodInfo m;
    m.name = "magicpig";
    m.description = "MagicPIG: SimHash LSH sampling (>= 2 of L tables) with importance weights + sink/local";
    m.paper = "Chen et al., MagicPIG: LSH Sampling for Efficient LLM Generation (ICLR 2025)";
    m.params = {
        {"K", ParamType::integer, 10, "SimHash bits per table (0 = every token collides: exact attention)",
         "MagicPIG README (K=10, L=150); CTKVR also runs (9,120), (8,75)", 0, 30},
        {"L", ParamType::integer, 150, "hash tables", "MagicPIG README (K=10, L=150)", 1, 1e5},
        {"min_collisions", ParamType::integer, 2, "tables a token must share with the query to be sampled",
         "MagicPIG library/lsh (mask value 2)", 1, 1e5},
        {"sink", ParamType::integer, 4, "static initial tokens kept on the GPU",
         "MagicPIG models/attnserver.py num_sink_tokens = 4", 0, 1e9},
        {"window", ParamType::integer, 64,
         "static last prompt tokens kept on the GPU (decode tokens stay on the GPU too)",
         "MagicPIG models/attnserver.py num_local_tokens = 64", 0, 1e9},
        {"seed", ParamType::integer, 0, "seed of the hash hyperplanes (mixed with the run's per-head seed)",
         "ours", 0, 4294967295.0},
    };
    m.check = [](const nlohmann::json& j) {
        const long L = j.at("L").get<long>(), mc = j.at("min_collisions").get<long>();
        if (mc > L)
            throw ParamError("parameter 'min_collisions' = " + std::to_string(mc) + " exceeds 'L' = " +
                             std::to_string(L) + " (no token could ever be sampled)");
    };
    m.make = [](const nlohmann::json& j) {
        MagicPigParams p;
        p.hash.K = j.at("K").get<int>();
        p.hash.L = j.at("L").get<int>();
        p.hash.seed = j.at("seed").get<uint64_t>();
        p.min_collisions = j.at("min_collisions").get<int>();
        p.sink = j.at("sink").get<int>();
        p.window = j.at("window").get<int>();
        return std::make_unique<MagicPig>(p);
    };
    return m;
}

}  // namespace retro
