// Per query head: the draws (sharpness, sink and local targets, needle affinity) and the calibration that
// fits the head's query coefficients to them (docs/synth.md, "Per-head draws and calibration").
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "attention/attention.hpp"
#include "trace/synth_random.hpp"
#include "trace/synth_stages.hpp"

namespace retro::synth_detail {

namespace {

constexpr int kCalibSteps = 4;  ///< decode steps (spread evenly) the per-head calibration averages over
constexpr int kCalibTokens = 4096;  ///< far tokens sampled per calibration step
constexpr double kMaxLogit = 40.0;  ///< cap on the fitted recency peak and sink logits

/// Finds c in [0, cap] with f(c) ~= target for f (nearly) increasing in c: doubles hi from 1 until
/// f(hi) >= target, then bisects. Returns 0 if f(0) >= target; if the target is out of reach below
/// `cap`, returns the point of the doubling grid (capped) where f was largest.
double solve_increasing(const std::function<double(double)>& f, double target, double cap) {
    if (f(0.0) >= target) return 0.0;
    double lo = 0.0, hi = std::min(1.0, cap);
    double best_c = 0.0, best_f = f(0.0);
    for (;;) {
        const double v = f(hi);
        if (v >= target) break;
        if (v > best_f) {
            best_f = v;
            best_c = hi;
        }
        if (hi >= cap) return best_c;  // unreachable: best effort
        lo = hi;
        hi = std::min(2.0 * hi, cap);
    }
    for (int it = 0; it < 40; ++it) {
        const double mid = 0.5 * (lo + hi);
        if (f(mid) < target) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

/// One reference decode step of the calibration: the component scores (semantic with unit beta, recency
/// carrier with unit lambda, sink direction with unit b, fixed part) of the head's query on a sample of
/// the visible tokens: all sinks, all of the last local_window tokens, and every stride-th token in
/// between (weighted by the stride) so the calibration costs O(kCalibTokens).
struct CalibStep {
    std::vector<int32_t> ids;  ///< sampled tokens: sinks [0, ns), far [ns, nf), window [nf, m)
    int ns = 0, nf = 0;
    float logw_far = 0;        ///< log(stride) of the far samples
    std::vector<float> sem, loc, snk, fix;  ///< [m] component scores
    std::vector<float> work;   ///< [m] the logits of the coefficients being tried
};

/// The reference decode steps: kCalibSteps spread evenly over [0, steps), without repeats.
std::vector<int> calibration_steps(int steps) {
    std::vector<int> refs;
    for (int k = 0; k < kCalibSteps; ++k) {
        const int t = (int)std::lround((double)k * (steps - 1) / std::max(1, kCalibSteps - 1));
        if (refs.empty() || refs.back() != t) refs.push_back(t);
    }
    return refs;
}

CalibStep sample_step(const QueryComponents& q, const float* K, const SynthHeadInfo& info, int step) {
    const LayerContext& c = q.c;
    const int d = c.d, s0 = std::min(c.p.sink_tokens, c.p.prompt_len);
    const int t = c.npf + step, pos = c.p.prompt_len + step, n = pos + 1;
    CalibStep f;
    const int w0 = std::max(s0, n - c.p.local_window);
    const int stride = std::max(1, (w0 - s0) / kCalibTokens);
    for (int i = 0; i < s0; ++i) f.ids.push_back(i);
    f.ns = (int)f.ids.size();
    for (int i = s0; i < w0; i += stride) f.ids.push_back(i);
    f.nf = (int)f.ids.size();
    for (int i = w0; i < n; ++i) f.ids.push_back(i);
    f.logw_far = std::log((float)stride);
    std::vector<float> x((size_t)d), tmp((size_t)d);
    const auto scores_of = [&](const float* x_pre, std::vector<float>& out) {
        std::copy(x_pre, x_pre + d, tmp.begin());
        c.rope.rotate(tmp.data(), pos);
        out.resize(f.ids.size());
        attention_scores_ids(tmp.data(), K, f.ids, d, c.inv_sqrt_d, out.data());
    };
    q.semantic(t, x.data());
    scores_of(x.data(), f.sem);
    scores_of(q.local.data(), f.loc);
    scores_of(q.kv.e_s.data(), f.snk);
    q.fixed_part(t, info, x.data());
    scores_of(x.data(), f.fix);
    f.work.resize(f.ids.size());
    return f;
}

/// Log-sum-exp of f.work over sample range [i0, i1), far samples weighted by their stride.
double lse(const CalibStep& f, int i0, int i1) {
    if (i1 <= i0) return -std::numeric_limits<double>::infinity();
    float m = -std::numeric_limits<float>::infinity();
    for (int i = i0; i < i1; ++i) m = std::max(m, f.work[(size_t)i] + (i >= f.ns && i < f.nf ? f.logw_far : 0.0f));
    double sum = 0;
    for (int i = i0; i < i1; ++i)
        sum += std::exp(f.work[(size_t)i] + (i >= f.ns && i < f.nf ? f.logw_far : 0.0f) - m);
    return (double)m + std::log(sum);
}

/// f.work = the logits with coefficients (beta, lambda, b).
void set_logits(CalibStep& f, double beta, double lambda, double b) {
    for (size_t i = 0; i < f.work.size(); ++i)
        f.work[i] = (float)(beta * f.sem[i] + lambda * f.loc[i] + b * f.snk[i]) + f.fix[i];
}

/// Mean over the steps of the share of the non-sink mass on the last local_window tokens.
double local_share(std::vector<CalibStep>& R, double beta, double lambda, double b) {
    double acc = 0;
    for (CalibStep& f : R) {
        set_logits(f, beta, lambda, b);
        const int m = (int)f.work.size();
        acc += std::exp(lse(f, f.nf, m) - lse(f, f.ns, m));
    }
    return acc / (double)R.size();
}

/// Mean over the steps of the share of the mass on the sink tokens.
double sink_share(std::vector<CalibStep>& R, double beta, double lambda, double b) {
    double acc = 0;
    for (CalibStep& f : R) {
        set_logits(f, beta, lambda, b);
        const int m = (int)f.work.size();
        acc += std::exp(lse(f, 0, f.ns) - lse(f, 0, m));
    }
    return acc / (double)R.size();
}

/// Means over the steps of var(sem), var(loc) and cov(sem, loc) over the far tokens.
struct FarMoments {
    double va = 0, vb = 0, cab = 0;
};

FarMoments far_moments(const std::vector<CalibStep>& R) {
    FarMoments mo;
    for (const CalibStep& f : R) {
        const int i0 = f.ns, i1 = std::max(f.ns + 1, f.nf), m = i1 - i0;
        double ma = 0, mb = 0;
        for (int i = i0; i < i1; ++i) {
            ma += f.sem[(size_t)i];
            mb += f.loc[(size_t)i];
        }
        ma /= m;
        mb /= m;
        double a2 = 0, b2 = 0, ab = 0;
        for (int i = i0; i < i1; ++i) {
            const double xa = f.sem[(size_t)i] - ma, yb = f.loc[(size_t)i] - mb;
            a2 += xa * xa;
            b2 += yb * yb;
            ab += xa * yb;
        }
        mo.va += a2 / m / (double)R.size();
        mo.vb += b2 / m / (double)R.size();
        mo.cab += ab / m / (double)R.size();
    }
    return mo;
}

/// Caps keep the fitted coefficients physical when a target is out of reach (tiny heads): the recency
/// peak and the sink logit stay below kMaxLogit.
struct Caps {
    double lambda = 0, sink = 0;
};

Caps coefficient_caps(const std::vector<CalibStep>& R, bool sink_by_mean) {
    double loc_max = 0, snk_max = 0;
    for (const CalibStep& f : R) {
        for (float v : f.loc) loc_max = std::max(loc_max, (double)v);
        // "mean" sinks score ~0 and the other tokens below: cap the sinks' lead over the far tokens
        double far = 0;
        if (sink_by_mean && f.nf > f.ns) {
            for (int i = f.ns; i < f.nf; ++i) far += f.snk[(size_t)i];
            far /= f.nf - f.ns;
        }
        for (int i = 0; i < f.ns; ++i) snk_max = std::max(snk_max, (double)f.snk[(size_t)i] - far);
    }
    return {loc_max > 0 ? kMaxLogit / loc_max : 0.0, snk_max > 0 ? kMaxLogit / snk_max : 0.0};
}

}  // namespace

SynthHeadInfo draw_head(const SynthParams& p, int layer, int qh) {
    Rng r(p.seed, kHeadParam, (uint64_t)layer, (uint64_t)qh);
    SynthHeadInfo h;
    h.peaked = r.uniform() < p.peaked_fraction;
    const double u = h.peaked ? 0.6 + 0.4 * r.uniform() : 0.4 * r.uniform();
    h.sharpness = p.sharp_min + (p.sharp_max - p.sharp_min) * u;
    h.sink_target = r.uniform(p.sink_mass_min, p.sink_mass_max);
    // The layer profile overrides the draws (taken all the same, so the other draws do not move).
    if (layer < p.diffuse_layers) {
        const double v = h.peaked ? (u - 0.6) / 0.4 : u / 0.4;  // U(0, 1) either way
        h.peaked = false;
        h.sharpness = p.diffuse_sharpness * (0.5 + 0.5 * v);
    }
    if (layer < p.sink_onset * p.num_layers) h.sink_target = 0.0;
    h.local_target = r.uniform(p.local_mass_min, p.local_mass_max);
    const double a = r.uniform();
    const double b = r.uniform();
    h.needle_affinity = a < p.needle_head_fraction ? 0.5 + 0.5 * b : 0.0;
    return h;
}

void calibrate_head(const QueryComponents& q, const float* K, SynthHeadInfo& info) {
    const LayerContext& c = q.c;
    const int s0 = std::min(c.p.sink_tokens, c.p.prompt_len);
    std::vector<CalibStep> R;
    for (int step : calibration_steps(c.steps)) R.push_back(sample_step(q, K, info, step));
    const FarMoments mo = far_moments(R);
    const double sig2 = info.sharpness * info.sharpness;
    const Caps cap = coefficient_caps(R, c.sink_by_mean);
    // lambda: the mean share of the non-sink mass on the last local_window tokens = local_target.
    const auto local = [&](double lam) { return local_share(R, info.beta, lam, info.sink_coef); };
    // b: the mean share of the mass on the sink tokens = sink_target.
    const auto sink = [&](double b) { return sink_share(R, info.beta, info.lambda, b); };
    info.lambda = 0;
    // beta and lambda, alternately (3 rounds): beta makes the std of the head's content scores
    // (semantic + recency ripple) over the far tokens equal to its sharpness.
    // "offset" sinks barely touch the other tokens' scores: b is fitted once, after beta and lambda.
    // "mean" sinks move every token that carries less of the mean (heavy hitters), which takes mass
    // from the recency window: b is refitted in every round and lambda sees it.
    for (int round = 0; round < 3; ++round) {
        // beta^2 va + 2 beta lambda cab + lambda^2 vb = sig2; keep at least a quarter of the
        // semantic spread when the ripple alone would exceed it.
        const double lam = info.lambda;
        const double disc = lam * lam * mo.cab * mo.cab - mo.va * (lam * lam * mo.vb - sig2);
        double beta = mo.va > 0 && disc > 0 ? (-lam * mo.cab + std::sqrt(disc)) / mo.va : 0.0;
        if (mo.va > 0) beta = std::max(beta, 0.25 * info.sharpness / std::sqrt(mo.va));
        info.beta = beta;
        info.lambda = solve_increasing(local, info.local_target, cap.lambda);
        if (c.sink_by_mean && s0 > 0) info.sink_coef = solve_increasing(sink, info.sink_target, cap.sink);
    }
    if (!c.sink_by_mean) info.sink_coef = s0 > 0 ? solve_increasing(sink, info.sink_target, cap.sink) : 0.0;
}

}  // namespace retro::synth_detail
