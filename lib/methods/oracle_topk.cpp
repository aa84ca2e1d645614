// `oracle_topk`: the exact top-k tokens by score: the upper bound for any method that attends k tokens.
#include <algorithm>
#include <numeric>
#include <unordered_set>

#include "attention/attention.hpp"
#include "attention/group_attention.hpp"
#include "core/error.hpp"
#include "methods/builtin_methods.hpp"

namespace retro {

namespace {
enum class Gqa { per_head, max, sum };

struct OracleParams {
    double k = 100;              ///< budget: >= 1 tokens, (0,1) fraction of visible tokens
    Gqa gqa = Gqa::per_head;     ///< per query head, or one shared set by max/sum of softmax weights
};

// Indices of the k largest values of v: [n] (ties broken by lower index), unordered.
void top_indices(const float* v, int n, int k, std::vector<int32_t>& out) {
    out.resize((size_t)n);
    std::iota(out.begin(), out.end(), 0);
    if (k < n) {
        std::nth_element(out.begin(), out.begin() + k, out.end(), [&](int32_t a, int32_t b) {
            return v[a] > v[b] || (v[a] == v[b] && a < b);
        });
        out.resize((size_t)k);
    }
}

class OracleTopK final : public Method {
  public:
    explicit OracleTopK(OracleParams p) : p_(p) {}
    void build(const MethodContext& ctx, const KVView&) override { ctx_ = ctx; }
    void select(const float* q, int, const KVView& kv, Selection& out) override {
        const int n = kv.n, d = kv.d, g = ctx_.group;
        const int k = resolve_budget(p_.k, n);
        // The whole group's scores in one pass over the keys: scores_ [g, n].
        scores_.resize((size_t)g * n);
        group_attention_scores(q, g, kv.keys, n, d, ctx_.scale, scores_.data());
        if (p_.gqa == Gqa::per_head) {
            out.exact.resize((size_t)g);
            for (int h = 0; h < g; ++h) top_indices(scores_.data() + (size_t)h * n, n, k, out.exact[(size_t)h]);
        } else {
            agg_.assign((size_t)n, 0.0f);
            for (int h = 0; h < g; ++h) {
                float* s = scores_.data() + (size_t)h * n;
                softmax_inplace(s, n);
                for (int i = 0; i < n; ++i) agg_[i] = p_.gqa == Gqa::max ? std::max(agg_[i], s[i]) : agg_[i] + s[i];
            }
            top_indices(agg_.data(), n, k, out.shared());
        }
        out.scan_ops = (double)g * n;
        // KV offloaded, fetched on demand with no cache: the union of the group's lists crosses PCIe.
        size_t fetched = out.exact[0].size();
        if (out.exact.size() > 1) {
            std::unordered_set<int32_t> u;
            for (auto& l : out.exact) u.insert(l.begin(), l.end());
            fetched = u.size();
        }
        out.h2d_bytes = (double)fetched * ctx_.kv_token_bytes();
        // transfer units for the system model's GPU block cache: the selected tokens (first list first)
        if (out.exact.size() == 1) {
            out.fetch_tokens = out.exact[0];
        } else {
            std::unordered_set<int32_t> u;
            for (auto& l : out.exact)
                for (int32_t x : l)
                    if (u.insert(x).second) out.fetch_tokens.push_back(x);
        }
    }

  private:
    OracleParams p_;
    MethodContext ctx_;
    std::vector<float> scores_, agg_;
};
}  // namespace

MethodInfo oracle_topk_method_info() {
    MethodInfo m;
    m.name = "oracle_topk";
    m.description = "exact top-k tokens by q.k (upper bound for any k-token method; scans all keys)";
    m.paper = "-";
    m.params = {
        {"k", ParamType::number, 100, "token budget: >= 1 tokens, in (0,1) a fraction of visible tokens",
         "RetrievalAttention retrieves top-100", 1e-9, 1e9},
        {"gqa", ParamType::string, "per_head",
         "per_head: each query head its own top-k; max|sum: one shared set by max/sum over the group "
         "of softmax weights",
         "ours", -1e300, 1e300, {"per_head", "max", "sum"}},
    };
    m.make = [](const nlohmann::json& j) {
        OracleParams p;
        p.k = j.at("k").get<double>();
        const auto g = j.at("gqa").get<std::string>();
        p.gqa = g == "max" ? Gqa::max : g == "sum" ? Gqa::sum : Gqa::per_head;
        return std::make_unique<OracleTopK>(p);
    };
    return m;
}

}  // namespace retro
