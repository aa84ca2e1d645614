#include "metrics/evaluator.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/error.hpp"

namespace retro {

Evaluator::Evaluator(const HeadSlice& slice, std::vector<int> recall_k)
    : s_(slice), recall_k_(std::move(recall_k)), ref_((size_t)slice.group) {
    scale_ = 1.0f / std::sqrt((float)slice.head_dim);
}

void Evaluator::prepare_step(int t) {
    t_ = t;
    n_ = s_.visible(t);
    const int d = s_.head_dim, G = s_.group;
    // The whole group in one fused pass over K and V: scores [G, n], weights [G, n], out [G, d].
    queries_.resize((size_t)G * d);
    for (int g = 0; g < G; ++g) std::copy(s_.query(g, t), s_.query(g, t) + d, queries_.begin() + (size_t)g * d);
    scores_.resize((size_t)G * n_);
    weights_.resize((size_t)G * n_);
    out_.resize((size_t)G * d);
    lse_.resize((size_t)G);
    group_exact_attention(queries_.data(), G, s_.keys.data(), s_.values.data(), n_, d, scale_, scores_.data(),
                          weights_.data(), out_.data(), lse_.data(), scratch_.flash);
    std::vector<float> tmp;
    for (int g = 0; g < G; ++g) {
        HeadReference& r = ref_[(size_t)g];
        r.scores = {scores_.data() + (size_t)g * n_, (size_t)n_};
        r.weights = {weights_.data() + (size_t)g * n_, (size_t)n_};
        r.lse = lse_[(size_t)g];
        r.out.assign(out_.begin() + (size_t)g * d, out_.begin() + (size_t)(g + 1) * d);
        r.recall_threshold.clear();
        r.recall_kk.clear();
        for (int k : recall_k_) {
            const int kk = std::min(k, n_);
            tmp.assign(r.scores.begin(), r.scores.end());
            std::nth_element(tmp.begin(), tmp.begin() + (kk - 1), tmp.end(), std::greater<float>());
            const float sk = tmp[(size_t)kk - 1];
            // Tie-tolerant: a token counts if its score is within 1e-6*|s_k| of the k-th score.
            r.recall_threshold.push_back(sk - 1e-6f * std::abs(sk));
            r.recall_kk.push_back(kk);
        }
    }
}

void Evaluator::check_selection(const Selection& sel, const std::string& method) {
    retro::check_selection(sel, method, s_.group, n_, t_, check_scratch_);
}

void Evaluator::score(const Selection& sel, int g, const float* approx, double lse, QueryMetrics& m) const {
    const int d = s_.head_dim;
    const HeadReference& r = ref_[(size_t)g];
    auto ids = sel.exact_for(g);
    double est_tokens = 0;
    for (const auto& c : sel.estimated) est_tokens += c.size;
    m.recall.assign(recall_k_.size(), 0.0);
    double mass = 0;
    for (int32_t id : ids) mass += r.weights[(size_t)id];
    for (size_t k = 0; k < recall_k_.size(); ++k) {
        long hits = 0;
        const float thr = r.recall_threshold[k];
        for (int32_t id : ids) hits += r.scores[(size_t)id] >= thr;
        m.recall[k] = (double)std::min<long>(hits, r.recall_kk[k]) / r.recall_kk[k];
    }
    m.mass = std::min(mass, 1.0);
    double num = 0, den = 0, dot = 0, na = 0;
    for (int j = 0; j < d; ++j) {
        const double e = (double)approx[j] - r.out[j];
        num += e * e;
        den += (double)r.out[j] * r.out[j];
        dot += (double)approx[j] * r.out[j];
        na += (double)approx[j] * approx[j];
    }
    m.out_err = den > 0 ? std::sqrt(num / den) : (num > 0 ? 1.0 : 0.0);
    m.out_cos = (na > 0 && den > 0) ? dot / std::sqrt(na * den) : 0.0;
    m.lse_err = std::isfinite(lse) ? std::abs(lse - r.lse) : std::numeric_limits<double>::infinity();
    m.exact_frac = (double)ids.size() / n_;
    m.est_frac = est_tokens / n_;
}

double Evaluator::evaluate(const Selection& sel, const std::string& method, std::vector<QueryMetrics>& out) {
    check_selection(sel, method);
    const int d = s_.head_dim, g_count = s_.group;
    out.resize((size_t)g_count);
    std::vector<float> approx((size_t)g_count * d);
    std::vector<double> lse((size_t)g_count);
    // Timed: the group's attention over its selection, one pass over the selected K and V rows.
    const auto t0 = std::chrono::steady_clock::now();
    selection_outputs(queries_.data(), KVView{s_.keys.data(), s_.values.data(), n_, d}, sel, g_count, scale_,
                      approx.data(), lse.data(), scratch_);
    const double attend_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    for (int g = 0; g < g_count; ++g) score(sel, g, approx.data() + (size_t)g * d, lse[(size_t)g], out[(size_t)g]);
    return attend_us;
}

void Evaluator::evaluate_output(const Selection& sel, const std::string& method, const float* out,
                                const float* lse, std::vector<QueryMetrics>& qm) {
    check_selection(sel, method);
    qm.resize((size_t)s_.group);
    for (int g = 0; g < s_.group; ++g)
        score(sel, g, out + (size_t)g * s_.head_dim, lse[g], qm[(size_t)g]);
}

}  // namespace retro
