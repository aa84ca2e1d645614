#pragma once
// Centroid rank: how much of the true attention the wave index's clusters hold when ranked by centroid
// score, next to the centroid estimate of it and the best possible ranking (RetroInfer Fig. 7 style;
// `retro-bench centroid-rank`, docs/plots.md "centroid_rank").
//
// Per (layer, KV head) the prompt outside the steady zone, tokens [sink, prompt_len - window), is
// clustered exactly as the wave method builds its index (segmented spherical k-means, one centroid per
// tokens_per_cluster tokens, `segment`-token segments, final global assignment; each centroid the mean of
// its member keys). Then for every query head of the group and every sampled decode step, with
// s_i = q.k_i / sqrt(d) over all tokens the step sees and Z = sum_i exp(s_i) (full attention's
// denominator):
//   true      A_c = sum_{i in c} exp(s_i) / Z       the attention cluster c truly holds
//   estimate  E_c = |c| exp(q.centroid_c / sqrt(d)) / Z   RetroInfer's estimation (Eq. 3); E_c <= A_c by
//             Jensen's inequality (exp is convex and the centroid is the members' mean): a lower bound
// and, with the clusters ranked by centroid score q.centroid_c (what the index retrieves first),
//   centroid_true(r)  = sum of A over the top r clusters by centroid score
//   centroid_est(r)   = sum of E over the same clusters (never above centroid_true(r))
//   oracle(r)         = sum of the r largest A (no ranking of these clusters can capture more)
// averaged over query heads, steps and KV heads, at log-spaced ranks r. `clustered` = sum of all A (the
// rest of the attention is on the steady zone and the decode tokens).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/head_selection.hpp"
#include "trace/reader.hpp"

namespace retro {

struct CentroidRankParams {
    int sink = 4;                     ///< steady-zone sink tokens left out of the index
    int window = 64;                  ///< steady-zone local window left out of the index
    double tokens_per_cluster = 16;   ///< tokens per centroid (wave's default)
    int segment = 8192;               ///< k-means segment in tokens
    int iters = 10;                   ///< k-means assignment passes
    int step_stride = 4;              ///< use every n-th decode step
};

/// One KV head's curves: cumulative shares at every rank 1..clusters, means over its queries.
struct CentroidRankHead {
    int clusters = 0;
    std::vector<double> cen_true, cen_est, oracle;  ///< [clusters] cumulative, mean over queries
    double clustered = 0;                           ///< sum of A over all clusters, mean over queries
    int queries = 0;                                ///< query heads x sampled steps
    double build_ms = 0;                            ///< k-means wall time
};

/// The curves of one head slice. ConfigError when the prompt leaves fewer than 16 tokens outside
/// sink + window.
CentroidRankHead centroid_rank_head(const HeadSlice& s, const CentroidRankParams& p);

/// The curves averaged over heads at log-spaced ranks (every rank up to 16, then ~24 per decade, and
/// the last); `clusters` is the smallest cluster count over the heads.
struct CentroidRankCurves {
    int clusters = 0;
    std::vector<int> ranks;
    std::vector<double> cen_true, cen_est, oracle;  ///< [ranks]
    double clustered = 0;                           ///< mean over heads
    double build_ms = 0;                            ///< mean over heads
    int queries_per_head = 0;
};

/// Checks `p` (ConfigError naming the option), then computes every head of `heads` on `threads` OpenMP
/// threads (0 = all) and averages them.
CentroidRankCurves centroid_rank(const TraceReader& reader, const HeadSelection& heads,
                                 const CentroidRankParams& p, int threads);

/// The JSON document `retro-bench centroid-rank --json` writes (what `retro-bench plot` draws).
nlohmann::json centroid_rank_json(const std::string& trace, const HeadSelection& heads, int prompt_len,
                                  const CentroidRankParams& p, const CentroidRankCurves& c);

}  // namespace retro
