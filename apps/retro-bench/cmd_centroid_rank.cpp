// `retro-bench centroid-rank TRACE --json FILE`: how much of the true attention the wave index's clusters
// hold when ranked by centroid score, next to the centroid estimate of it and the best possible ranking
// (RetroInfer Fig. 7 style; docs/plots.md "centroid_rank").
//
// Per (layer, KV head) the prompt outside the steady zone, tokens [sink, prompt_len - window), is clustered
// exactly as the wave method builds its index (segmented spherical k-means, one centroid per 16 tokens,
// 8K-token segments, final global assignment; each centroid the mean of its member keys). Then for every
// query head of the group and every sampled decode step, with s_i = q.k_i / sqrt(d) over all tokens the
// step sees and Z = sum_i exp(s_i) (full attention's denominator):
//   true      A_c = sum_{i in c} exp(s_i) / Z       the attention cluster c truly holds
//   estimate  E_c = |c| exp(q.centroid_c / sqrt(d)) / Z   RetroInfer's estimation (Eq. 3); E_c <= A_c by
//             Jensen's inequality (exp is convex and the centroid is the members' mean): a lower bound
// and, with the clusters ranked by centroid score q.centroid_c (what the index retrieves first),
//   centroid_true(r)  = sum of A over the top r clusters by centroid score
//   centroid_est(r)   = sum of E over the same clusters (never above centroid_true(r))
//   oracle(r)         = sum of the r largest A (no ranking of these clusters can capture more)
// averaged over query heads, steps and KV heads, at log-spaced ranks r. `clustered` = sum of all A (the
// rest of the attention is on the steady zone and the decode tokens).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cluster/wave_index.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"
#include "core/host.hpp"
#include "head_args.hpp"
#include "trace/reader.hpp"

namespace retro::cli {
namespace {

using json = nlohmann::json;

struct CrArgs {
    std::string trace;
    std::string layers, kv_heads;
    int sink = 4, window = 64;
    double tokens_per_cluster = 16;
    int segment = 8192;
    int iters = 10;
    int step_stride = 4;
    int threads = 0;
    std::string json_out;
};

struct HeadCurves {
    int m = 0;                                    ///< clusters
    std::vector<double> cen_true, cen_est, oracle;  ///< [m] cumulative, mean over queries
    double clustered = 0;                          ///< sum of A over all clusters, mean over queries
    int queries = 0;
    double build_ms = 0;
};

HeadCurves curves_for(const HeadSlice& s, const CrArgs& a) {
    const int d = s.head_dim, P = s.prompt_len;
    const int end = P - a.window;
    if (end - a.sink < 16) throw ConfigError(fmt::format("centroid-rank: prompt of {} tokens leaves nothing to cluster "
                                                         "outside sink {} + window {}", P, a.sink, a.window));
    KMeansParams kp;
    kp.tokens_per_cluster = a.tokens_per_cluster;
    kp.segment = a.segment;
    kp.iters = a.iters;
    kp.threads = 1;
    WaveIndex idx(d);
    const double t0 = omp_get_wtime();
    idx.add_block(s.keys.data(), s.values.data(), d, a.sink, end, kp);
    HeadCurves h;
    h.build_ms = 1e3 * (omp_get_wtime() - t0);
    const int m = idx.num_clusters();
    h.m = m;
    h.cen_true.assign((size_t)m, 0.0);
    h.cen_est.assign((size_t)m, 0.0);
    h.oracle.assign((size_t)m, 0.0);
    const float scale = 1.0f / std::sqrt((float)d);
    std::vector<double> sc, A((size_t)m), E((size_t)m), cs((size_t)m);
    std::vector<int> order((size_t)m);
    for (int t = 0; t < s.num_steps; t += std::max(1, a.step_stride)) {
        const int n = s.visible(t);
        for (int g = 0; g < s.group; ++g) {
            const float* q = s.query(g, t);
            sc.resize((size_t)n);
            double mx = -1e300;
            for (int i = 0; i < n; ++i) {
                const float* k = s.key(i);
                double dot = 0;
                for (int j = 0; j < d; ++j) dot += (double)q[j] * k[j];
                sc[(size_t)i] = dot * scale;
                mx = std::max(mx, sc[(size_t)i]);
            }
            double Z = 0;
            for (int i = 0; i < n; ++i) Z += std::exp(sc[(size_t)i] - mx);
            double clustered = 0;
            for (int c = 0; c < m; ++c) {
                double a_c = 0;
                for (int32_t i : idx.members(c)) a_c += std::exp(sc[(size_t)i] - mx);
                A[(size_t)c] = a_c / Z;
                clustered += A[(size_t)c];
                const float* cen = idx.centroid(c);
                double dot = 0;
                for (int j = 0; j < d; ++j) dot += (double)q[j] * cen[j];
                cs[(size_t)c] = dot * scale;
                E[(size_t)c] = idx.size(c) > 0 ? idx.size(c) * std::exp(cs[(size_t)c] - mx) / Z : 0.0;
            }
            std::iota(order.begin(), order.end(), 0);
            std::sort(order.begin(), order.end(), [&](int x, int y) {
                const bool ex = idx.size(x) > 0, ey = idx.size(y) > 0;  // empty clusters last
                if (ex != ey) return ex;
                return cs[(size_t)x] > cs[(size_t)y] || (cs[(size_t)x] == cs[(size_t)y] && x < y);
            });
            double ct = 0, ce = 0;
            for (int r = 0; r < m; ++r) {
                ct += A[(size_t)order[(size_t)r]];
                ce += E[(size_t)order[(size_t)r]];
                h.cen_true[(size_t)r] += ct;
                h.cen_est[(size_t)r] += ce;
            }
            std::vector<double> sorted = A;
            std::sort(sorted.begin(), sorted.end(), std::greater<>());
            double co = 0;
            for (int r = 0; r < m; ++r) h.oracle[(size_t)r] += (co += sorted[(size_t)r]);
            h.clustered += clustered;
            ++h.queries;
        }
    }
    for (auto* v : {&h.cen_true, &h.cen_est, &h.oracle})
        for (double& x : *v) x /= std::max(1, h.queries);
    h.clustered /= std::max(1, h.queries);
    return h;
}

int run_cr(const CrArgs& a) {
    if (a.sink < 0 || a.window < 0) throw ConfigError("--sink/--window must be >= 0");
    if (!(a.tokens_per_cluster >= 1)) throw ConfigError("--tokens-per-cluster must be >= 1");
    if (a.iters < 1) throw ConfigError("--iters must be >= 1");
    if (a.step_stride < 1) throw ConfigError("--step-stride must be >= 1");
    TraceReader reader(a.trace);
    const TraceInfo& info = reader.info();
    const HeadSelection sel = select_heads(reader, a.trace, a.layers, a.kv_heads);
    const std::vector<HeadCurves> res =
        map_heads(reader, sel, a.threads, [&](const HeadSlice& s) { return curves_for(s, a); });

    // mean over heads at log-spaced ranks (every rank up to 16, then ~24 per decade, and the last)
    int m = res[0].m;
    for (const auto& r : res) m = std::min(m, r.m);
    std::vector<int> ranks;
    for (int r = 1; r <= m;) {
        ranks.push_back(r);
        r = r < 16 ? r + 1 : std::max(r + 1, (int)std::lround(r * std::pow(10.0, 1.0 / 24)));
    }
    if (ranks.back() != m) ranks.push_back(m);
    std::vector<double> ct, ce, co;
    double clustered = 0, build = 0;
    for (int r : ranks) {
        double x = 0, y = 0, z = 0;
        for (const auto& h : res) {
            x += h.cen_true[(size_t)r - 1];
            y += h.cen_est[(size_t)r - 1];
            z += h.oracle[(size_t)r - 1];
        }
        ct.push_back(x / res.size());
        ce.push_back(y / res.size());
        co.push_back(z / res.size());
    }
    for (const auto& h : res) {
        clustered += h.clustered / res.size();
        build += h.build_ms / res.size();
    }
    fmt::print("centroid-rank {}: {} x {} head(s), {} clusters per head over tokens [{}, {}) of a {}-token prompt, "
               "{} queries per head (step stride {})\n",
               a.trace, sel.layers.size(), sel.kv_heads.size(), m, a.sink, info.prompt_len - a.window,
               info.prompt_len, res[0].queries, a.step_stride);
    fmt::print("  clustered share of the attention: {:.3f}; build {:.0f} ms per head\n", clustered, build);
    fmt::print("{:>8} {:>10} {:>14} {:>14} {:>10}\n", "rank", "% clusters", "true (by cen.)", "estimate", "oracle");
    for (size_t i = 0; i < ranks.size(); ++i)
        if (ranks[i] <= 4 || i % 8 == 0 || i + 1 == ranks.size())
            fmt::print("{:>8} {:>10.2f} {:>14.4f} {:>14.4f} {:>10.4f}\n", ranks[i], 100.0 * ranks[i] / m, ct[i],
                       ce[i], co[i]);
    if (!a.json_out.empty()) {
        json out = {{"kind", "centroid-rank"},
                    {"trace", a.trace},
                    {"layers", sel.layers},
                    {"kv_heads", sel.kv_heads},
                    {"prompt_len", info.prompt_len},
                    {"clusters", m},
                    {"sink", a.sink},
                    {"window", a.window},
                    {"tokens_per_cluster", a.tokens_per_cluster},
                    {"segment", a.segment},
                    {"iters", a.iters},
                    {"step_stride", a.step_stride},
                    {"queries_per_head", res[0].queries},
                    {"clustered", clustered},
                    {"build_ms", build},
                    {"host", host_info()},
                    {"series",
                     {{{"label", "true attention, clusters by centroid score"},
                       {"kind", "true"},
                       {"method", "wave"},
                       {"rank", ranks},
                       {"cum_attention", ct}},
                      {{"label", "centroid estimate (Jensen lower bound)"},
                       {"kind", "estimate"},
                       {"method", "wave"},
                       {"rank", ranks},
                       {"cum_attention", ce}},
                      {{"label", "oracle ranking (upper bound)"},
                       {"kind", "oracle"},
                       {"method", "oracle_topk"},
                       {"rank", ranks},
                       {"cum_attention", co}}}}};
        write_file_atomic(a.json_out, out.dump(1) + "\n");
        fmt::print("wrote {}\n", a.json_out);
    }
    return 0;
}

const CommandRegistrar reg(62, [](CLI::App& app) {
    auto a = std::make_shared<CrArgs>();
    auto* sub = app.add_subcommand("centroid-rank",
                                   "Cumulative true and centroid-estimated attention vs. wave cluster rank "
                                   "(RetroInfer Fig. 7 style)");
    sub->add_option("trace", a->trace, "trace file (.h5)")->required();
    sub->add_option("--layers", a->layers, "comma-separated layers (default: all in the file)");
    sub->add_option("--kv-heads", a->kv_heads, "comma-separated KV heads (default: all)");
    sub->add_option("--sink", a->sink, "steady-zone sink tokens left out of the index (default 4)");
    sub->add_option("--window", a->window, "steady-zone local window left out of the index (default 64)");
    sub->add_option("--tokens-per-cluster", a->tokens_per_cluster, "tokens per centroid (default 16)");
    sub->add_option("--segment", a->segment, "k-means segment in tokens (default 8192)");
    sub->add_option("--iters", a->iters, "k-means assignment passes (default 10)");
    sub->add_option("--step-stride", a->step_stride, "use every n-th decode step (default 4)");
    sub->add_option("--threads", a->threads, "threads over heads (default: OpenMP's)");
    sub->add_option("--json", a->json_out, "write the curves to this JSON file (retro-bench plot reads it)");
    return std::function<int()>([a] { return run_cr(*a); });
});

}  // namespace
}  // namespace retro::cli
