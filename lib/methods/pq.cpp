// `pq`: PQCache (Zhang et al., PQCache: Product Quantization-based KVCache for Long Context LLM
// Inference, SIGMOD 2025). Keys of the middle tokens (outside the initial + local tokens) get a product
// quantizer per (layer, KV head); at each decode step the query's lookup table scores every coded token
// by Σ_j LUT_j[code_j] (= q · k̂), the top-k are fetched and attended exactly with the initial and local
// tokens. Tokens leaving the local window are encoded with the existing codebooks (no re-fitting, Alg. 2).
// docs/methods/pq.md has the algorithm as built, the parameters' sources and the deviations.
#include <cmath>

#include "cluster/pq.hpp"
#include "core/error.hpp"
#include "methods/builtin_methods.hpp"
#include "methods/params.hpp"
#include "methods/pq.hpp"
#include "methods/pq_head.hpp"

namespace retro {

namespace {

// The method is one PqHead (methods/pq_head.hpp: JSON-free, shared with the GPU twin) per KV head.
class PqMethod final : public Method {
  public:
    explicit PqMethod(const PqHeadParams& p) : head_(p) {}
    void build(const MethodContext& ctx, const KVView& prompt) override { head_.build(ctx, prompt); }
    void append(const KVView& kv, int pos) override { head_.append(kv, pos); }
    void select(const float* q, int, const KVView& kv, Selection& out) override { head_.select(q, kv, out); }
    Footprint footprint() const override { return head_.footprint(); }

  private:
    PqHead head_;
};

}  // namespace

PqHeadParams pq_params_from_json(const nlohmann::json& j) {
    PqHeadParams p;
    p.k = j.at("k").get<double>();
    p.m = j.at("m").get<int>();
    p.nbits = j.at("nbits").get<int>();
    p.iters = j.at("iters").get<int>();
    p.sink = j.at("sink").get<int>();
    p.window = j.at("window").get<int>();
    p.gqa = pq_gqa_of(j.at("gqa").get<std::string>());
    return p;
}

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
        return std::make_unique<PqMethod>(pq_params_from_json(j));
    };
    return m;
}

}  // namespace retro
