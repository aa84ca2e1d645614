#include "methods/magicpig_head.hpp"

#include <algorithm>
#include <cmath>

#include "cluster/roargraph.hpp"  // dot_f32

namespace retro {

void MagicPigHead::build(const MethodContext& ctx, const KVView& prompt) {
    ctx_ = ctx;
    const int P = prompt.n, d = prompt.d;
    ib_ = std::min(p_.sink, P);
    ie_ = std::max(ib_, P - p_.window);
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
}

void MagicPigHead::static_tokens(int n, std::vector<int32_t>& ids, std::vector<float>& lw) const {
    const size_t from = ids.size();
    for (int i = 0; i < std::min(ib_, n); ++i) ids.push_back(i);
    for (int i = std::max(ie_, ib_); i < n; ++i) ids.push_back(i);
    lw.resize(lw.size() + (ids.size() - from), 0.0f);
}

size_t MagicPigHead::sample(const float* qh, const uint32_t* codes, MagicPigScratch& s, std::vector<int32_t>& ids,
                            std::vector<float>& lw) const {
    if (centered_.empty()) return 0;
    const int d = tables_.d();
    if (s.count.size() != (size_t)tables_.n()) s.count.assign((size_t)tables_.n(), 0u);
    s.touched.clear();
    const size_t visited = tables_.collide(codes, s.count, s.touched);
    const float qn = std::sqrt(dot_f32(qh, qh, d));
    std::sort(s.touched.begin(), s.touched.end());
    for (int32_t i : s.touched) {
        const uint32_t c = s.count[(size_t)i];
        s.count[(size_t)i] = 0;
        if ((int)c < p_.min_collisions) continue;
        const float kn = norm_[(size_t)i];
        const double cosv =
            qn > 0 && kn > 0 ? dot_f32(qh, centered_.data() + (size_t)i * d, d) / ((double)qn * kn) : 0.0;
        const double prob = simhash_sample_probability(cosv, p_.hash.K, p_.hash.L, p_.min_collisions);
        ids.push_back(ib_ + i);
        lw.push_back((float)-std::log(std::max(prob, 1e-300)));
    }
    return visited;
}

void MagicPigHead::select(const float* q, int n, MagicPigScratch& s, Selection& out) const {
    const int d = ctx_.head_dim, g = ctx_.group;
    out.exact.resize((size_t)g);
    out.exact_log_weight.resize((size_t)g);
    s.codes.resize((size_t)p_.hash.L);
    for (int h = 0; h < g; ++h) {
        auto& ids = out.exact[(size_t)h];
        auto& lw = out.exact_log_weight[(size_t)h];
        ids.clear();
        lw.clear();
        static_tokens(n, ids, lw);
        if (centered_.empty()) continue;
        const float* qh = q + (size_t)h * d;
        tables_.codes(qh, s.codes.data());
        sample(qh, s.codes.data(), s, ids, lw);
    }
    account(out);
}

void MagicPigHead::account(Selection& out) const {
    const int d = ctx_.head_dim, g = ctx_.group;
    // Work: each query head projects onto K*L hyperplanes (bucket walks are integer work, not counted).
    out.scan_ops = (double)g * p_.hash.K * p_.hash.L;
    // The queries and their L hash codes (int32) go to the CPU; partial outputs + LSE come back.
    const double act = (double)dtype_bytes(ctx_.storage);
    out.d2h_bytes = (double)g * (d * act + p_.hash.L * 4.0);
    out.h2d_bytes = (double)g * (d * act + 4.0);
}

Footprint MagicPigHead::footprint(int n_seen) const {
    const double static_tokens = (double)ib_ + std::max(0, n_seen - ie_);
    const double act = (double)dtype_bytes(ctx_.storage);
    const double planes = (double)ctx_.head_dim * p_.hash.K * p_.hash.L * act;
    return {static_tokens * ctx_.kv_token_bytes() + planes,
            centered_.empty() ? 0.0 : tables_.table_bytes() + (double)norm_.size() * 4.0};
}

}  // namespace retro
