#include "trace/stats.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>

#include "attention/attention.hpp"
#include "core/error.hpp"

namespace retro {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

void StatsOptions::validate() const {
    const auto check = [](const char* name, int v, int lo) {
        if (v < lo)
            throw ParamError(std::string("stats option ") + name + " = " + std::to_string(v) + ": expected >= " +
                             std::to_string(lo));
    };
    check("step_stride", step_stride, 1);
    check("sink_tokens", sink_tokens, 0);
    check("local_tokens", local_tokens, 0);
    check("top_mass_k", top_mass_k, 1);
    check("overlap_k", overlap_k, 1);
    check("locality_near", locality_near, 1);
    check("locality_far", locality_far, 1);
    if (!(top_frac > 0 && top_frac <= 1))
        throw ParamError("stats option top_frac = " + std::to_string(top_frac) + ": expected (0, 1]");
    if (!(ridge >= 0 && std::isfinite(ridge)))
        throw ParamError("stats option ridge = " + std::to_string(ridge) + ": expected a finite value >= 0");
}

// ---- building blocks ----------------------------------------------------------------------------------

MassCounts tokens_for_mass(const float* w, int n) {
    MassCounts c;
    if (n <= 0) return c;
    std::vector<float> s(w, w + n);
    std::sort(s.begin(), s.end(), std::greater<float>());
    double total = 0;
    for (float x : s) total += x;
    const double tol = 1e-6 * total;
    const double t50 = 0.5 * total - tol, t90 = 0.9 * total - tol, t99 = 0.99 * total - tol;
    double cum = 0;
    int i = 0;
    for (; i < n; ++i) {
        cum += s[(size_t)i];
        if (c.n50 == 0 && cum >= t50) c.n50 = i + 1;
        if (c.n90 == 0 && cum >= t90) c.n90 = i + 1;
        if (cum >= t99) {
            c.n99 = i + 1;
            break;
        }
    }
    if (c.n50 == 0) c.n50 = n;
    if (c.n90 == 0) c.n90 = n;
    if (c.n99 == 0) c.n99 = n;
    return c;
}

double top_k_mass(const float* w, int n, int k) {
    double m = 0;
    for (int32_t i : top_k_indices(w, n, k)) m += w[i];
    return m;
}

double set_overlap(std::span<const int32_t> a, std::span<const int32_t> b, int k) {
    if (k <= 0) k = (int)a.size();
    if (k <= 0) return kNaN;
    std::vector<int32_t> x(a.begin(), a.end()), y(b.begin(), b.end());
    std::sort(x.begin(), x.end());
    std::sort(y.begin(), y.end());
    size_t i = 0, j = 0, common = 0;
    while (i < x.size() && j < y.size()) {
        if (x[i] < y[j]) ++i;
        else if (y[j] < x[i]) ++j;
        else {
            ++common;
            ++i;
            ++j;
        }
    }
    return (double)common / k;
}

KeyDistribution::KeyDistribution(const float* x, int n, int d, double ridge) : d_(d) {
    if (d < 1 || n < 2)
        throw ParamError("KeyDistribution: need n >= 2 vectors of dimension >= 1 (got n = " + std::to_string(n) +
                         ", d = " + std::to_string(d) + ")");
    mean_.assign((size_t)d, 0.0);
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < d; ++j) mean_[(size_t)j] += x[(size_t)i * d + j];
    for (double& m : mean_) m /= n;
    // Centered copy (float), covariance by BLAS: C = Xc^T Xc / n.
    std::vector<float> xc((size_t)n * d);
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < d; ++j) xc[(size_t)i * d + j] = (float)(x[(size_t)i * d + j] - mean_[(size_t)j]);
    std::vector<float> cf((size_t)d * d, 0.0f);
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, d, n, 1.0f / n, xc.data(), d, 0.0f, cf.data(), d);
    std::vector<double> c((size_t)d * d);
    for (int i = 0; i < d; ++i)
        for (int j = i; j < d; ++j) c[(size_t)i * d + j] = c[(size_t)j * d + i] = cf[(size_t)i * d + j];
    trace_ = 0;
    for (int i = 0; i < d; ++i) trace_ += c[(size_t)i * d + i];
    double lam = ridge * trace_ / d;
    if (!(lam > 0)) lam = 1e-12 * std::max(1.0, trace_ / d) + 1e-30;
    for (int i = 0; i < d; ++i) c[(size_t)i * d + i] += lam;
    // Cholesky C = L L^T (lower, in place).
    for (int j = 0; j < d; ++j) {
        double s = c[(size_t)j * d + j];
        for (int k = 0; k < j; ++k) s -= c[(size_t)j * d + k] * c[(size_t)j * d + k];
        if (!(s > 0)) throw ParamError("KeyDistribution: covariance is not positive definite");
        const double ljj = std::sqrt(s);
        c[(size_t)j * d + j] = ljj;
        for (int i = j + 1; i < d; ++i) {
            double t = c[(size_t)i * d + j];
            for (int k = 0; k < j; ++k) t -= c[(size_t)i * d + k] * c[(size_t)j * d + k];
            c[(size_t)i * d + j] = t / ljj;
        }
    }
    // W = L^-1 (lower triangular), column by column: L w_j = e_j.
    std::vector<double> w((size_t)d * d, 0.0);
    for (int j = 0; j < d; ++j) {
        for (int i = j; i < d; ++i) {
            double s = (i == j) ? 1.0 : 0.0;
            for (int k = j; k < i; ++k) s -= c[(size_t)i * d + k] * w[(size_t)k * d + j];
            w[(size_t)i * d + j] = s / c[(size_t)i * d + i];
        }
    }
    winv_.assign(w.begin(), w.end());
}

void KeyDistribution::distances(const float* y, int m, double* out) const {
    const int d = d_;
    constexpr int kBlock = 4096;
    std::vector<float> yc, z;
    for (int r0 = 0; r0 < m; r0 += kBlock) {
        const int rows = std::min(kBlock, m - r0);
        yc.resize((size_t)rows * d);
        z.resize((size_t)rows * d);
        for (int i = 0; i < rows; ++i)
            for (int j = 0; j < d; ++j)
                yc[(size_t)i * d + j] = (float)(y[(size_t)(r0 + i) * d + j] - mean_[(size_t)j]);
        // Z = Yc W^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, d, d, 1.0f, yc.data(), d, winv_.data(), d, 0.0f,
                    z.data(), d);
        for (int i = 0; i < rows; ++i) {
            double s = 0;
            for (int j = 0; j < d; ++j) s += (double)z[(size_t)i * d + j] * z[(size_t)i * d + j];
            out[r0 + i] = std::sqrt(s);
        }
    }
}

double KeyDistribution::distance(const float* y) const {
    double r = 0;
    distances(y, 1, &r);
    return r;
}

// ---- per-head statistics ------------------------------------------------------------------------------

std::vector<QHeadStats> head_stats(const HeadSlice& s, const StatsOptions& opt) {
    opt.validate();
    const int d = s.head_dim, G = s.group, T = s.num_steps;
    if (d < 1 || G < 1 || T < 1 || s.prompt_len < 1)
        throw ParamError("head_stats: empty head slice (layer " + std::to_string(s.layer) + ", kv head " +
                         std::to_string(s.kv_head) + ")");
    if (s.keys.size() != (size_t)s.n_tokens() * d || s.queries.size() != (size_t)G * T * d)
        throw ParamError("head_stats: head slice arrays do not match its shape");
    const float scale = 1.0f / std::sqrt((float)d);
    std::vector<int> chosen;
    for (int t = 0; t < T; t += opt.step_stride) chosen.push_back(t);
    std::vector<char> is_chosen((size_t)T, 0), needed((size_t)T, 0);
    for (int t : chosen) {
        is_chosen[(size_t)t] = needed[(size_t)t] = 1;
        if (t + 1 < T) needed[(size_t)t + 1] = 1;
    }

    // Key distribution over the prompt keys (shared by the group).
    double k_mahal = kNaN, key_mean_ratio = kNaN;
    std::unique_ptr<KeyDistribution> kd;
    if (opt.mahalanobis && s.prompt_len >= 2) {
        kd = std::make_unique<KeyDistribution>(s.keys.data(), s.prompt_len, d, opt.ridge);
        std::vector<double> dist((size_t)s.prompt_len);
        kd->distances(s.keys.data(), s.prompt_len, dist.data());
        k_mahal = std::accumulate(dist.begin(), dist.end(), 0.0) / s.prompt_len;
        double mn = 0;
        for (double m : kd->mean()) mn += m * m;
        key_mean_ratio = kd->trace() > 0 ? std::sqrt(mn / kd->trace()) : kNaN;
    }

    // Positional locality of the prompt keys, the sinks left out (shared by the group).
    const int first = std::min(opt.sink_tokens, s.prompt_len);
    const int dists[2] = {opt.locality_near, opt.locality_far};
    const std::vector<double> key_cos = centered_key_cosines(s.keys.data(), s.prompt_len, d, first, dists);

    std::vector<QHeadStats> out((size_t)G);
    std::vector<float> w;
    for (int g = 0; g < G; ++g) {
        QHeadStats& r = out[(size_t)g];
        r.layer = s.layer;
        r.kv_head = s.kv_head;
        r.q_head = s.first_q_head + g;
        r.steps = (int)chosen.size();
        double n50 = 0, n90 = 0, n99 = 0, f50 = 0, f90 = 0, f99 = 0, top = 0, sink = 0, local = 0;
        double ov = 0, stat = 0, qcos = 0, topf = 0, statf = 0;
        int n_ov = 0, n_stat = 0, n_cos = 0;
        std::vector<int32_t> prev_top;  // top overlap_k of step t-1 (when needed)
        int prev_t = -2;
        std::vector<int32_t> first_top, first_topf;  // top_mass_k / top_frac of the first chosen step
        for (int t = 0; t < T; ++t) {
            if (!needed[(size_t)t]) continue;
            const int n = s.visible(t);
            w.resize((size_t)n);
            attention_scores(s.query(g, t), s.keys.data(), n, d, scale, w.data());
            softmax_inplace(w.data(), n);
            std::vector<int32_t> topo = top_k_indices(w.data(), n, opt.overlap_k);
            if (prev_t == t - 1 && is_chosen[(size_t)prev_t]) {
                ov += set_overlap(prev_top, topo, opt.overlap_k);
                ++n_ov;
            }
            if (is_chosen[(size_t)t]) {
                const MassCounts mc = tokens_for_mass(w.data(), n);
                n50 += mc.n50;
                n90 += mc.n90;
                n99 += mc.n99;
                f50 += (double)mc.n50 / n;
                f90 += (double)mc.n90 / n;
                f99 += (double)mc.n99 / n;
                top += top_k_mass(w.data(), n, opt.top_mass_k);
                const int kf = std::max(1, (int)std::ceil(opt.top_frac * n - 1e-9));
                topf += top_k_mass(w.data(), n, kf);
                double sm = 0, lm = 0;
                for (int i = 0; i < std::min(opt.sink_tokens, n); ++i) sm += w[(size_t)i];
                for (int i = std::max(0, n - opt.local_tokens); i < n; ++i) lm += w[(size_t)i];
                sink += sm;
                local += lm;
                if (first_top.empty()) {
                    first_top = top_k_indices(w.data(), n, opt.top_mass_k);
                    first_topf = top_k_indices(w.data(), n, kf);
                } else {
                    double m = 0, mf = 0;
                    for (int32_t i : first_top) m += w[(size_t)i];
                    for (int32_t i : first_topf) mf += w[(size_t)i];
                    stat += m;
                    statf += mf;
                    ++n_stat;
                }
                if (t + 1 < T) {
                    const float* a = s.query(g, t);
                    const float* b = s.query(g, t + 1);
                    double ab = 0, aa = 0, bb = 0;
                    for (int j = 0; j < d; ++j) {
                        ab += (double)a[j] * b[j];
                        aa += (double)a[j] * a[j];
                        bb += (double)b[j] * b[j];
                    }
                    if (aa > 0 && bb > 0) {
                        qcos += ab / std::sqrt(aa * bb);
                        ++n_cos;
                    }
                }
            }
            prev_top = std::move(topo);
            prev_t = t;
        }
        const double c = (double)chosen.size();
        r.n50 = n50 / c;
        r.n90 = n90 / c;
        r.n99 = n99 / c;
        r.f50 = f50 / c;
        r.f90 = f90 / c;
        r.f99 = f99 / c;
        r.top_mass = top / c;
        r.sink_mass = sink / c;
        r.local_mass = local / c;
        r.overlap = n_ov ? ov / n_ov : kNaN;
        r.static_top_mass = n_stat ? stat / n_stat : kNaN;
        r.top_frac_mass = topf / c;
        r.static_top_frac_mass = n_stat ? statf / n_stat : kNaN;
        r.query_cos = n_cos ? qcos / n_cos : kNaN;
        r.k_mahal = k_mahal;
        r.key_mean_ratio = key_mean_ratio;
        r.key_cos_near = key_cos[0];
        r.key_cos_far = key_cos[1];
        if (kd) {
            std::vector<float> qs;
            for (int t : chosen) qs.insert(qs.end(), s.query(g, t), s.query(g, t) + d);
            std::vector<double> dist(chosen.size());
            kd->distances(qs.data(), (int)chosen.size(), dist.data());
            r.q_mahal = std::accumulate(dist.begin(), dist.end(), 0.0) / c;
            r.ood_ratio = k_mahal > 0 ? r.q_mahal / k_mahal : kNaN;
        } else {
            r.q_mahal = r.ood_ratio = kNaN;
        }
    }
    return out;
}

std::vector<double> centered_key_cosines(const float* keys, int n, int d, int first, std::span<const int> dists) {
    std::vector<double> out(dists.size(), kNaN);
    if (n - first < 2) return out;
    std::vector<double> mu((size_t)d, 0.0);
    for (int i = first; i < n; ++i)
        for (int j = 0; j < d; ++j) mu[(size_t)j] += keys[(size_t)i * d + j];
    for (double& m : mu) m /= n - first;
    const auto centered_dot = [&](int a, int b) {
        const float* x = keys + (size_t)a * d;
        const float* y = keys + (size_t)b * d;
        double c = 0;
        for (int j = 0; j < d; ++j) c += (x[j] - mu[(size_t)j]) * (y[j] - mu[(size_t)j]);
        return c;
    };
    std::vector<double> norm((size_t)(n - first));  // |k_i - mu|, no copy of the keys
    for (int i = first; i < n; ++i) norm[(size_t)(i - first)] = std::sqrt(centered_dot(i, i));
    for (size_t k = 0; k < dists.size(); ++k) {
        const int dist = dists[k];
        if (dist < 1 || dist >= n - first) continue;
        double acc = 0;
        const int pairs = n - first - dist;
        for (int i = first; i < first + pairs; ++i) {
            const double den = norm[(size_t)(i - first)] * norm[(size_t)(i + dist - first)];
            if (den > 0) acc += centered_dot(i, i + dist) / den;
        }
        out[k] = acc / pairs;
    }
    return out;
}

namespace {
template <class F>
void for_each_stat(QHeadStats& s, F&& f) {
    f("n50", s.n50);
    f("n90", s.n90);
    f("n99", s.n99);
    f("f50", s.f50);
    f("f90", s.f90);
    f("f99", s.f99);
    f("top_mass", s.top_mass);
    f("static_top_mass", s.static_top_mass);
    f("top_frac_mass", s.top_frac_mass);
    f("static_top_frac_mass", s.static_top_frac_mass);
    f("overlap", s.overlap);
    f("query_cos", s.query_cos);
    f("sink_mass", s.sink_mass);
    f("local_mass", s.local_mass);
    f("q_mahal", s.q_mahal);
    f("k_mahal", s.k_mahal);
    f("ood_ratio", s.ood_ratio);
    f("key_mean_ratio", s.key_mean_ratio);
    f("key_cos_near", s.key_cos_near);
    f("key_cos_far", s.key_cos_far);
}
}  // namespace

QHeadStats mean_stats(std::span<const QHeadStats> v) {
    QHeadStats m;
    m.layer = m.kv_head = m.q_head = -1;
    m.steps = 0;
    for (const auto& s : v) m.steps += s.steps;
    std::vector<std::pair<double, int>> acc;
    for_each_stat(m, [&](const char*, double&) { acc.emplace_back(0.0, 0); });
    for (const auto& s0 : v) {
        QHeadStats s = s0;
        size_t i = 0;
        for_each_stat(s, [&](const char*, double& x) {
            if (std::isfinite(x)) {
                acc[i].first += x;
                ++acc[i].second;
            }
            ++i;
        });
    }
    size_t i = 0;
    for_each_stat(m, [&](const char*, double& x) {
        x = acc[i].second ? acc[i].first / acc[i].second : kNaN;
        ++i;
    });
    return m;
}

nlohmann::json to_json(const QHeadStats& s0) {
    QHeadStats s = s0;
    nlohmann::json j;
    if (s.layer >= 0) j["layer"] = s.layer;
    if (s.kv_head >= 0) j["kv_head"] = s.kv_head;
    if (s.q_head >= 0) j["q_head"] = s.q_head;
    j["steps"] = s.steps;
    for_each_stat(s, [&](const char* name, double& x) {
        if (std::isfinite(x)) j[name] = x;
        else j[name] = nullptr;
    });
    return j;
}

}  // namespace retro
