#pragma once
// PQCache's per-head state and selection as a JSON-free class (the method `pq`, lib/methods/pq.cpp, is a
// thin wrapper; its GPU twin's layer run, kernels/run/pq_layer.cpp, builds the codebooks and encodes the
// tokens leaving the local window with it, and its checks, kernels/pq/pq_checks.cpp, compare the kernels
// with its scoring functions). The RETRO_GPU_ONLY reference library links it. docs/methods/pq.md.
#include <cstdint>
#include <string>
#include <vector>

#include "cluster/pq.hpp"
#include "methods/method.hpp"

namespace retro {

/// How a GQA group's query heads combine their PQ scores (the parameter `gqa`).
enum class PqGqa { max, mean, softmax_sum, per_head };

/// "max" | "mean" | "softmax_sum" | "per_head" (anything else: max) and back.
PqGqa pq_gqa_of(const std::string& name);
const char* pq_gqa_name(PqGqa g);

struct PqHeadParams {
    double k = 0.2;     ///< budget: tokens retrieved beyond the static ones (>= 1 count, (0,1) fraction)
    int m = 2;          ///< sub-spaces
    int nbits = 6;      ///< bits per code
    int iters = 10;     ///< k-means iterations
    int sink = 4;       ///< initial tokens, always attended, on the GPU
    int window = 64;    ///< local tokens (the current one included), always attended, on the GPU
    PqGqa gqa = PqGqa::max;
};

/// scores[i] = sum over j = 0..m-1, in that order, of lut[j * ksub + codes[i * m + j]] (float, from 0):
/// the asymmetric-distance score q . k^ of coded token i. lut: [m, ksub] (ProductQuantizer::
/// inner_product_table); codes: [nc, m]. The GPU kernel (kernels/pq/pq.cu) sums in the same order.
void pq_adc_scores(const float* lut, int m, int ksub, const uint16_t* codes, int nc, float* scores);

/// The one ranking of a KV head's coded tokens from its query heads' scores [g, nc] (gqa max: the max
/// over the heads in head order, as std::max; mean: their sum in head order; softmax_sum: the sum of
/// each head's softmax(s / sqrt(d)) over the coded tokens): agg [nc]. Not for per_head. ex: scratch.
void pq_group_scores(const float* scores, int g, int nc, int d, PqGqa gqa, std::vector<float>& agg,
                     std::vector<float>& ex);

/// One KV head of the method `pq`: quantizer, codes of the coded (middle) tokens, bookkeeping.
class PqHead {
  public:
    PqHead() = default;
    explicit PqHead(const PqHeadParams& p) : p_(p) {}

    /// The quantizer fit on the prompt's middle tokens [sink, n - window), seed ctx.seed + 1, and their
    /// codes. Throws ParamError when m does not divide head_dim.
    void build(const MethodContext& ctx, const KVView& prompt);
    /// Token `pos` appended (kv holds tokens [0, pos]): tokens leaving the local window are encoded.
    void append(const KVView& kv, int pos);
    /// The method's selection for the group's queries q: [g, d] over kv (its n visible tokens).
    void select(const float* q, const KVView& kv, Selection& out);
    Footprint footprint() const;

    // -- what the GPU twin uses (kernels/run/pq_layer.cpp) --
    /// What select does before scoring: n visible, the tokens that left the window encoded.
    void advance(const KVView& kv);
    /// Retrieved tokens at n visible: min(resolve_budget(k, n), coded tokens).
    int budget(int n) const;
    /// The always-attended tokens at n visible, in the method's order: [0, sink end), then
    /// [coded end, n).
    void static_tokens(int n, std::vector<int32_t>& out) const;
    /// out <- the selection of `found` (best-first token ids, one list, or one per query head with
    /// per_head): exact lists = static + found, fetch_tokens, scan_ops, h2d and the pending d2h bytes
    /// (taken: the next step reports only newer evictions), as select reports them.
    void finish(int n, const std::vector<std::vector<int32_t>>& found, Selection& out);

    const PqHeadParams& params() const { return p_; }
    const ProductQuantizer& quantizer() const { return pq_; }
    const std::vector<uint16_t>& codes() const { return codes_; }  ///< [coded_end - sink_end, m]
    int sink_end() const { return s_end_; }                          ///< initial tokens are [0, sink_end)
    int coded_end() const { return coded_end_; }                     ///< coded tokens [sink_end, coded_end)
    bool trained() const { return trained_; }
    int trainings() const { return trainings_; }  ///< times the codebooks were fit (0, or 1)
    /// Bytes of `tokens` tokens' codes bit-packed (m * nbits bits each).
    double code_bytes(int tokens) const;

  private:
    void encode_evicted(const KVView& kv);

    PqHeadParams p_;
    MethodContext ctx_;
    ProductQuantizer pq_;
    int d_ = 0;
    int s_end_ = 0;
    int coded_end_ = 0;
    int n_ = 0;
    bool trained_ = false;
    int trainings_ = 0;
    double pending_d2h_ = 0;
    std::vector<uint16_t> codes_;
    std::vector<float> scores_, agg_, lut_, ex_;
    std::vector<int32_t> stat_;
    std::vector<std::vector<int32_t>> found_;
};

}  // namespace retro
