// `pq`: PQCache (Zhang et al., PQCache: Product Quantization-based KVCache for Long Context LLM
// Inference, SIGMOD 2025). Keys of the middle tokens (outside the initial + local tokens) get a product
// quantizer per (layer, KV head); at each decode step the query's lookup table scores every coded token
// by Σ_j LUT_j[code_j] (= q · k̂), the top-k are fetched and attended exactly with the initial and local
// tokens. Tokens leaving the local window are encoded with the existing codebooks (no re-fitting, Alg. 2).
// docs/methods/pq.md has the algorithm as built, the parameters' sources and the deviations.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "cluster/pq.hpp"
#include "core/error.hpp"
#include "methods/builtin_methods.hpp"
#include "methods/params.hpp"
#include "trace/stats.hpp"

namespace retro {

namespace {

enum class PqGqa { max, mean, softmax_sum, per_head };

struct PqMethodParams {
    double k = 0.2;     ///< budget: tokens retrieved beyond the static ones (>= 1 count, (0,1) fraction)
    int m = 2;          ///< sub-spaces
    int nbits = 6;      ///< bits per code
    int iters = 10;     ///< k-means iterations
    int sink = 4;       ///< initial tokens, always attended, on the GPU
    int window = 64;    ///< local tokens (the current one included), always attended, on the GPU
    PqGqa gqa = PqGqa::max;
};

class PqMethod final : public Method {
  public:
    explicit PqMethod(PqMethodParams p) : p_(p) {}

    void build(const MethodContext& ctx, const KVView& prompt) override {
        ctx_ = ctx;
        d_ = prompt.d;
        PQParams qp;
        qp.m = p_.m;
        qp.nbits = p_.nbits;
        qp.iters = p_.iters;
        qp.seed = ctx.seed + 1;
        pq_ = ProductQuantizer(d_, qp);  // throws when m does not divide head_dim
        s_end_ = std::min(p_.sink, prompt.n);
        coded_end_ = std::max(s_end_, prompt.n - p_.window);
        codes_.clear();
        trained_ = coded_end_ > s_end_;
        if (trained_) {
            const int nm = coded_end_ - s_end_;
            const float* x = prompt.keys + (size_t)s_end_ * d_;
            pq_.train(x, nm);
            codes_.resize((size_t)nm * p_.m);
            pq_.encode(x, nm, codes_.data());
        }
        n_ = prompt.n;
        pending_d2h_ = 0;
    }

    void append(const KVView& kv, int pos) override {
        n_ = pos + 1;
        encode_evicted(kv);
    }

    void select(const float* q, int, const KVView& kv, Selection& out) override {
        const int n = kv.n, d = kv.d, g = ctx_.group, M = p_.m, K = pq_.ksub();
        n_ = n;
        encode_evicted(kv);  // tokens the method was not told about (no-op under the runner)
        // static: initial tokens and everything not yet coded (the local window, decode tokens)
        stat_.clear();
        for (int i = 0; i < std::min(s_end_, n); ++i) stat_.push_back(i);
        for (int i = coded_end_; i < n; ++i) stat_.push_back(i);
        const int nc = coded_end_ - s_end_;  // coded tokens [s_end_, coded_end_)
        const int k = std::min(resolve_budget(p_.k, n), nc);

        // scores_ [g, nc]: q_h · k̂ through each head's lookup table
        scores_.assign((size_t)g * nc, 0.0f);
        lut_.resize((size_t)M * K);
        for (int h = 0; h < g && nc > 0; ++h) {
            pq_.inner_product_table(q + (size_t)h * d, lut_.data());
            float* s = scores_.data() + (size_t)h * nc;
            for (int i = 0; i < nc; ++i) {
                const uint16_t* c = codes_.data() + (size_t)i * M;
                float v = 0;
                for (int j = 0; j < M; ++j) v += lut_[(size_t)j * K + c[j]];
                s[i] = v;
            }
        }
        found_.assign((size_t)(p_.gqa == PqGqa::per_head ? g : 1), {});
        if (k > 0) {
            if (p_.gqa == PqGqa::per_head) {
                for (int h = 0; h < g; ++h) top_k(scores_.data() + (size_t)h * nc, nc, k, found_[(size_t)h]);
            } else if (p_.gqa == PqGqa::softmax_sum) {
                // PQCache's public code: each query head's softmax(q·k̂ / √d) over the coded tokens, summed
                // over the group
                agg_.assign((size_t)nc, 0.0f);
                const float scale = 1.0f / std::sqrt((float)d);
                ex_.resize((size_t)nc);
                for (int h = 0; h < g; ++h) {
                    const float* s = scores_.data() + (size_t)h * nc;
                    const float mx = *std::max_element(s, s + nc);
                    double z = 0;
                    for (int i = 0; i < nc; ++i) z += ex_[(size_t)i] = std::exp((s[i] - mx) * scale);
                    const float inv = (float)(1.0 / z);
                    for (int i = 0; i < nc; ++i) agg_[(size_t)i] += ex_[(size_t)i] * inv;
                }
                top_k(agg_.data(), nc, k, found_[0]);
            } else {
                agg_.assign(scores_.begin(), scores_.begin() + nc);
                for (int h = 1; h < g; ++h)
                    for (int i = 0; i < nc; ++i) {
                        const float v = scores_[(size_t)h * nc + i];
                        agg_[(size_t)i] = p_.gqa == PqGqa::max ? std::max(agg_[(size_t)i], v) : agg_[(size_t)i] + v;
                    }
                top_k(agg_.data(), nc, k, found_[0]);
            }
        }
        // exact lists: static + retrieved (disjoint by construction, each list duplicate-free)
        out.exact.resize(found_.size());
        for (size_t l = 0; l < found_.size(); ++l) {
            auto& ids = out.exact[l];
            ids = stat_;
            ids.insert(ids.end(), found_[l].begin(), found_[l].end());
        }
        // transfer units for the system model's block cache: retrieved tokens, the heads' best-first
        // lists interleaved rank by rank, each once
        append_interleaved_unique(found_, out.fetch_tokens);
        // Work: the lookup table is ksub·d multiply-adds per query head (ksub d-dim inner products);
        // scoring is m table lookups per coded token per query head (m/d of an inner product).
        out.scan_ops = (double)g * K + (double)g * nc * M / d;
        // Traffic: every coded token's codes (m·nbits bits, bit-packed as the paper's ratio assumes) come
        // from CPU memory each step, then the retrieved tokens' KV; evicted window tokens went down.
        out.h2d_bytes = code_bytes(nc) + (double)out.fetch_tokens.size() * ctx_.kv_token_bytes();
        out.d2h_bytes = pending_d2h_;
        pending_d2h_ = 0;
    }

    Footprint footprint() const override {
        const double el = (double)dtype_bytes(ctx_.storage);
        const double stat = std::min(s_end_, n_) + std::max(0, n_ - coded_end_);
        const double centroids = trained_ ? (double)pq_.ksub() * d_ * el : 0.0;  // m·ksub·dsub = ksub·d
        return {stat * ctx_.kv_token_bytes() + centroids, code_bytes(coded_end_ - s_end_)};
    }

  private:
    double code_bytes(int tokens) const { return std::ceil((double)tokens * p_.m * p_.nbits / 8.0); }

    // Tokens leaving the local window get codes from the existing codebooks and move to CPU memory.
    void encode_evicted(const KVView& kv) {
        const int w0 = std::max(coded_end_, std::min(n_, kv.n) - p_.window);
        if (w0 <= coded_end_) return;
        if (!trained_) {  // nothing was coded at build (tiny prompt): train on the first evicted tokens
            pq_.train(kv.key(coded_end_), w0 - coded_end_);
            trained_ = true;
        }
        const size_t old = codes_.size();
        codes_.resize(old + (size_t)(w0 - coded_end_) * p_.m);
        pq_.encode(kv.key(coded_end_), w0 - coded_end_, codes_.data() + old);
        pending_d2h_ += (double)(w0 - coded_end_) * ctx_.kv_token_bytes() + code_bytes(w0 - coded_end_);
        coded_end_ = w0;
    }

    // ids <- token ids of the k largest of s[0, nc) (ties to the lower position), best first.
    void top_k(const float* s, int nc, int k, std::vector<int32_t>& ids) const {
        ids = top_k_indices(s, nc, k);
        for (auto& i : ids) i += s_end_;
    }

    PqMethodParams p_;
    MethodContext ctx_;
    ProductQuantizer pq_;
    int d_ = 0;
    int s_end_ = 0;      ///< initial tokens are [0, s_end_)
    int coded_end_ = 0;  ///< coded (CPU-side) tokens are [s_end_, coded_end_)
    int n_ = 0;
    bool trained_ = false;
    double pending_d2h_ = 0;
    std::vector<uint16_t> codes_;  ///< [coded_end_ - s_end_, m]
    std::vector<float> scores_, agg_, lut_, ex_;
    std::vector<int32_t> stat_;
    std::vector<std::vector<int32_t>> found_;
};

}  // namespace

MethodInfo pq_method_info() {
    MethodInfo m;
    m.name = "pq";
    m.description = "PQCache: product-quantized keys (m sub-spaces x 2^b centroids), top-k by asymmetric PQ "
                    "score + initial and local tokens";
    m.paper = "Zhang et al., PQCache: Product Quantization-based KVCache for Long Context LLM Inference (SIGMOD 2025)";
    m.params = {
        {"k", ParamType::number, 0.2,
         "budget: tokens retrieved beyond the initial + local ones: >= 1 tokens, in (0,1) a fraction of visible "
         "tokens",
         "PQCache §4.1: 1/5 and 1/10 of the input tokens (Tables 2, 4)", 1e-9, 1e9},
        {"m", ParamType::integer, 2, "PQ sub-spaces (must divide head_dim)",
         "PQCache §4.2.7: m=2, b=6 the LongBench default; m=4, b=8 on InfiniteBench", 1, 1024},
        {"nbits", ParamType::integer, 6, "bits per code: 2^nbits centroids per sub-space",
         "PQCache §4.2.7 (m=2, b=6 default)", 1, 16},
        {"iters", ParamType::integer, 10, "k-means iterations per sub-space",
         "PQCache's public code clips its adaptive iteration count (Eq. 3) to [3, 10] "
         "(multi_core_compressor_v2.py); 10 is the cap, the paper gives no bounds",
         1, 1000},
        {"sink", ParamType::integer, 4, "initial tokens always attended (kept on the GPU)",
         "ours: PQCache keeps initial tokens but gives no count (StreamingLLM's 4)", 0, 1e9},
        {"window", ParamType::integer, 64, "local tokens always attended, the current one included (on the GPU)",
         "ours: PQCache keeps local tokens but gives no count (RetroInfer's steady zone, 64)", 1, 1e9},
        {"gqa", ParamType::string, "max",
         "one shared top-k ranked by the max (or mean) of the group's PQ scores, or by the sum over the group "
         "of each head's softmax(q.k^/sqrt(d)) (softmax_sum), or per_head: each query head its own top-k",
         "the paper ranks per KV head without saying how the group combines; max is ours, softmax_sum is "
         "PQCache's public code (pq_search.py decoding_attn_GQA_euc)",
         -1e300, 1e300, {"max", "mean", "softmax_sum", "per_head"}},
    };
    m.check_trace = [](const nlohmann::json& j, const TraceInfo& t) {
        PQParams qp;
        qp.m = j.at("m").get<int>();
        qp.nbits = j.at("nbits").get<int>();
        qp.iters = j.at("iters").get<int>();
        ProductQuantizer::check(t.head_dim, qp);  // what build() checks
    };
    m.index_bytes = [](const nlohmann::json& j, const TraceInfo& t) {
        // codes [P, m] uint16, codebooks [m, 2^nbits, d/m] float32, and the k-means training buffers of one
        // sub-space (assignment, distance, permutation per row: 12 bytes)
        const double P = t.prompt_len, m = j.at("m").get<int>(), K = std::ldexp(1.0, j.at("nbits").get<int>());
        return P * m * 2.0 + K * t.head_dim * 4.0 + P * 12.0;
    };
    m.make = [](const nlohmann::json& j) {
        PqMethodParams p;
        p.k = j.at("k").get<double>();
        p.m = j.at("m").get<int>();
        p.nbits = j.at("nbits").get<int>();
        p.iters = j.at("iters").get<int>();
        p.sink = j.at("sink").get<int>();
        p.window = j.at("window").get<int>();
        const std::string g = j.at("gqa").get<std::string>();
        p.gqa = g == "per_head"      ? PqGqa::per_head
                : g == "mean"        ? PqGqa::mean
                : g == "softmax_sum" ? PqGqa::softmax_sum
                                     : PqGqa::max;
        return std::make_unique<PqMethod>(p);
    };
    return m;
}

}  // namespace retro
