// PQCache's per-head state and selection (pq_head.hpp).
#include "methods/pq_head.hpp"

#include <algorithm>
#include <cmath>

#include "core/top_k.hpp"

namespace retro {

PqGqa pq_gqa_of(const std::string& g) {
    return g == "per_head" ? PqGqa::per_head : g == "mean" ? PqGqa::mean : g == "softmax_sum" ? PqGqa::softmax_sum : PqGqa::max;
}

const char* pq_gqa_name(PqGqa g) {
    switch (g) {
        case PqGqa::mean: return "mean";
        case PqGqa::softmax_sum: return "softmax_sum";
        case PqGqa::per_head: return "per_head";
        case PqGqa::max: break;
    }
    return "max";
}

void pq_adc_scores(const float* lut, int m, int ksub, const uint16_t* codes, int nc, float* s) {
    for (int i = 0; i < nc; ++i) {
        const uint16_t* c = codes + (size_t)i * m;
        float v = 0;
        for (int j = 0; j < m; ++j) v += lut[(size_t)j * ksub + c[j]];
        s[i] = v;
    }
}

void pq_group_scores(const float* scores, int g, int nc, int d, PqGqa gqa, std::vector<float>& agg,
                     std::vector<float>& ex) {
    if (gqa == PqGqa::softmax_sum) {
        // PQCache's public code: each query head's softmax(q·k̂ / √d) over the coded tokens, summed over
        // the group
        agg.assign((size_t)nc, 0.0f);
        const float scale = 1.0f / std::sqrt((float)d);
        ex.resize((size_t)nc);
        for (int h = 0; h < g; ++h) {
            const float* s = scores + (size_t)h * nc;
            const float mx = *std::max_element(s, s + nc);
            double z = 0;
            for (int i = 0; i < nc; ++i) z += ex[(size_t)i] = std::exp((s[i] - mx) * scale);
            const float inv = (float)(1.0 / z);
            for (int i = 0; i < nc; ++i) agg[(size_t)i] += ex[(size_t)i] * inv;
        }
        return;
    }
    agg.assign(scores, scores + nc);
    for (int h = 1; h < g; ++h)
        for (int i = 0; i < nc; ++i) {
            const float v = scores[(size_t)h * nc + i];
            agg[(size_t)i] = gqa == PqGqa::max ? std::max(agg[(size_t)i], v) : agg[(size_t)i] + v;
        }
}

void PqHead::build(const MethodContext& ctx, const KVView& prompt) {
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
    trainings_ = 0;
    if (trained_) {
        const int nm = coded_end_ - s_end_;
        const float* x = prompt.keys + (size_t)s_end_ * d_;
        pq_.train(x, nm);
        ++trainings_;
        codes_.resize((size_t)nm * p_.m);
        pq_.encode(x, nm, codes_.data());
    }
    n_ = prompt.n;
    pending_d2h_ = 0;
}

void PqHead::append(const KVView& kv, int pos) {
    n_ = pos + 1;
    encode_evicted(kv);
}

void PqHead::advance(const KVView& kv) {
    n_ = kv.n;
    encode_evicted(kv);  // tokens the method was not told about (no-op under the runner)
}

int PqHead::budget(int n) const { return std::min(resolve_budget(p_.k, n), coded_end_ - s_end_); }

void PqHead::static_tokens(int n, std::vector<int32_t>& out) const {
    out.clear();
    for (int i = 0; i < std::min(s_end_, n); ++i) out.push_back(i);
    for (int i = coded_end_; i < n; ++i) out.push_back(i);
}

void PqHead::select(const float* q, const KVView& kv, Selection& out) {
    const int n = kv.n, d = kv.d, g = ctx_.group, M = p_.m, K = pq_.ksub();
    advance(kv);
    const int nc = coded_end_ - s_end_;  // coded tokens [s_end_, coded_end_)
    const int k = budget(n);

    // scores_ [g, nc]: q_h · k̂ through each head's lookup table
    scores_.assign((size_t)g * nc, 0.0f);
    lut_.resize((size_t)M * K);
    for (int h = 0; h < g && nc > 0; ++h) {
        pq_.inner_product_table(q + (size_t)h * d, lut_.data());
        pq_adc_scores(lut_.data(), M, K, codes_.data(), nc, scores_.data() + (size_t)h * nc);
    }
    found_.assign((size_t)(p_.gqa == PqGqa::per_head ? g : 1), {});
    // ids <- token ids of the k largest of s[0, nc) (ties to the lower position), best first
    const auto top_k = [&](const float* s, std::vector<int32_t>& ids) {
        ids = top_k_indices(s, nc, k);
        for (auto& i : ids) i += s_end_;
    };
    if (k > 0) {
        if (p_.gqa == PqGqa::per_head) {
            for (int h = 0; h < g; ++h) top_k(scores_.data() + (size_t)h * nc, found_[(size_t)h]);
        } else {
            pq_group_scores(scores_.data(), g, nc, d, p_.gqa, agg_, ex_);
            top_k(agg_.data(), found_[0]);
        }
    }
    finish(n, found_, out);
}

void PqHead::finish(int n, const std::vector<std::vector<int32_t>>& found, Selection& out) {
    const int g = ctx_.group, nc = coded_end_ - s_end_;
    static_tokens(n, stat_);
    // exact lists: static + retrieved (disjoint by construction, each list duplicate-free)
    out.exact.resize(found.size());
    for (size_t l = 0; l < found.size(); ++l) {
        auto& ids = out.exact[l];
        ids = stat_;
        ids.insert(ids.end(), found[l].begin(), found[l].end());
    }
    // transfer units for the system model's block cache: retrieved tokens, the heads' best-first lists
    // interleaved rank by rank, each once
    append_interleaved_unique(found, out.fetch_tokens);
    // Work: the lookup table is ksub·d multiply-adds per query head (ksub d-dim inner products); scoring
    // is m table lookups per coded token per query head (m/d of an inner product).
    out.scan_ops = (double)g * pq_.ksub() + (double)g * nc * p_.m / d_;
    // Traffic: every coded token's codes (m·nbits bits, bit-packed as the paper's ratio assumes) come from
    // CPU memory each step, then the retrieved tokens' KV; evicted window tokens went down.
    out.h2d_bytes = code_bytes(nc) + (double)out.fetch_tokens.size() * ctx_.kv_token_bytes();
    out.d2h_bytes = pending_d2h_;
    pending_d2h_ = 0;
}

Footprint PqHead::footprint() const {
    const double el = (double)dtype_bytes(ctx_.storage);
    const double stat = std::min(s_end_, n_) + std::max(0, n_ - coded_end_);
    const double centroids = trained_ ? (double)pq_.ksub() * d_ * el : 0.0;  // m·ksub·dsub = ksub·d
    return {stat * ctx_.kv_token_bytes() + centroids, code_bytes(coded_end_ - s_end_)};
}

double PqHead::code_bytes(int tokens) const { return std::ceil((double)tokens * p_.m * p_.nbits / 8.0); }

// Tokens leaving the local window get codes from the existing codebooks and move to CPU memory.
void PqHead::encode_evicted(const KVView& kv) {
    const int w0 = std::max(coded_end_, std::min(n_, kv.n) - p_.window);
    if (w0 <= coded_end_) return;
    if (!trained_) {  // nothing was coded at build (tiny prompt): train on the first evicted tokens
        pq_.train(kv.key(coded_end_), w0 - coded_end_);
        trained_ = true;
        ++trainings_;
    }
    const size_t old = codes_.size();
    codes_.resize(old + (size_t)(w0 - coded_end_) * p_.m);
    pq_.encode(kv.key(coded_end_), w0 - coded_end_, codes_.data() + old);
    pending_d2h_ += (double)(w0 - coded_end_) * ctx_.kv_token_bytes() + code_bytes(w0 - coded_end_);
    coded_end_ = w0;
}

}  // namespace retro
