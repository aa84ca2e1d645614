#include "analysis/centroid_rank.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cluster/wave_index.hpp"
#include "methods/wave_head.hpp"
#include "core/error.hpp"
#include "core/host.hpp"

namespace retro {

using json = nlohmann::json;

CentroidRankHead centroid_rank_head(const HeadSlice& s, const CentroidRankParams& p) {
    const int d = s.head_dim, P = s.prompt_len;
    const int end = P - p.window;
    if (end - p.sink < 16)
        throw ConfigError(fmt::format("centroid-rank: prompt of {} tokens leaves nothing to cluster "
                                      "outside sink {} + window {}",
                                      P, p.sink, p.window));
    KMeansParams kp;
    kp.tokens_per_cluster = p.tokens_per_cluster;
    kp.segment = p.segment;
    kp.iters = p.iters;
    kp.final_assign = WaveParams{}.final_assign;  // as the wave method's default build
    kp.threads = 1;
    WaveIndex idx(d);
    const double t0 = omp_get_wtime();
    idx.add_block(s.keys.data(), s.values.data(), d, p.sink, end, kp);
    CentroidRankHead h;
    h.build_ms = 1e3 * (omp_get_wtime() - t0);
    const int m = idx.num_clusters();
    h.clusters = m;
    h.cen_true.assign((size_t)m, 0.0);
    h.cen_est.assign((size_t)m, 0.0);
    h.oracle.assign((size_t)m, 0.0);
    const float scale = 1.0f / std::sqrt((float)d);
    std::vector<double> sc, A((size_t)m), E((size_t)m), cs((size_t)m);
    std::vector<int> order((size_t)m);
    for (int t = 0; t < s.num_steps; t += std::max(1, p.step_stride)) {
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

CentroidRankCurves centroid_rank(const TraceReader& reader, const HeadSelection& heads,
                                 const CentroidRankParams& p, int threads) {
    if (p.sink < 0 || p.window < 0) throw ConfigError("--sink/--window must be >= 0");
    if (!(p.tokens_per_cluster >= 1)) throw ConfigError("--tokens-per-cluster must be >= 1");
    if (p.iters < 1) throw ConfigError("--iters must be >= 1");
    if (p.step_stride < 1) throw ConfigError("--step-stride must be >= 1");
    const std::vector<CentroidRankHead> res =
        map_heads(reader, heads, threads, [&](const HeadSlice& s) { return centroid_rank_head(s, p); });

    CentroidRankCurves c;
    int m = res[0].clusters;
    for (const auto& r : res) m = std::min(m, r.clusters);
    c.clusters = m;
    for (int r = 1; r <= m;) {
        c.ranks.push_back(r);
        r = r < 16 ? r + 1 : std::max(r + 1, (int)std::lround(r * std::pow(10.0, 1.0 / 24)));
    }
    if (c.ranks.back() != m) c.ranks.push_back(m);
    for (int r : c.ranks) {
        double x = 0, y = 0, z = 0;
        for (const auto& h : res) {
            x += h.cen_true[(size_t)r - 1];
            y += h.cen_est[(size_t)r - 1];
            z += h.oracle[(size_t)r - 1];
        }
        c.cen_true.push_back(x / res.size());
        c.cen_est.push_back(y / res.size());
        c.oracle.push_back(z / res.size());
    }
    for (const auto& h : res) {
        c.clustered += h.clustered / res.size();
        c.build_ms += h.build_ms / res.size();
    }
    c.queries_per_head = res[0].queries;
    return c;
}

json centroid_rank_json(const std::string& trace, const HeadSelection& heads, int prompt_len,
                        const CentroidRankParams& p, const CentroidRankCurves& c) {
    return {{"kind", "centroid-rank"},
            {"trace", trace},
            {"layers", heads.layers},
            {"kv_heads", heads.kv_heads},
            {"prompt_len", prompt_len},
            {"clusters", c.clusters},
            {"sink", p.sink},
            {"window", p.window},
            {"tokens_per_cluster", p.tokens_per_cluster},
            {"segment", p.segment},
            {"iters", p.iters},
            {"step_stride", p.step_stride},
            {"queries_per_head", c.queries_per_head},
            {"clustered", c.clustered},
            {"build_ms", c.build_ms},
            {"host", host_info()},
            {"series",
             {{{"label", "true attention, clusters by centroid score"},
               {"kind", "true"},
               {"method", "wave"},
               {"rank", c.ranks},
               {"cum_attention", c.cen_true}},
              {{"label", "centroid estimate (Jensen lower bound)"},
               {"kind", "estimate"},
               {"method", "wave"},
               {"rank", c.ranks},
               {"cum_attention", c.cen_est}},
              {{"label", "oracle ranking (upper bound)"},
               {"kind", "oracle"},
               {"method", "oracle_topk"},
               {"rank", c.ranks},
               {"cum_attention", c.oracle}}}}};
}

}  // namespace retro
