// `retro-bench centroid-rank TRACE --json FILE`: how much of the true attention the wave index's clusters
// hold when ranked by centroid score, next to the centroid estimate of it and the best possible ranking
// (RetroInfer Fig. 7 style; docs/plots.md "centroid_rank"). The computation and its definitions are
// lib/analysis/centroid_rank.hpp; this file parses the arguments and prints.
#include <fmt/format.h>

#include "analysis/centroid_rank.hpp"
#include "analysis/head_selection.hpp"
#include "commands.hpp"
#include "core/fs.hpp"
#include "trace/reader.hpp"

namespace retro::cli {
namespace {

struct CrArgs {
    std::string trace;
    std::string layers, kv_heads;
    CentroidRankParams p;
    int threads = 0;
    std::string json_out;
};

int run_cr(const CrArgs& a) {
    TraceReader reader(a.trace);
    const TraceInfo& info = reader.info();
    const HeadSelection sel = select_heads(reader, a.trace, a.layers, a.kv_heads);
    const CentroidRankCurves c = centroid_rank(reader, sel, a.p, a.threads);
    const int m = c.clusters;
    fmt::print("centroid-rank {}: {} x {} head(s), {} clusters per head over tokens [{}, {}) of a {}-token prompt, "
               "{} queries per head (step stride {})\n",
               a.trace, sel.layers.size(), sel.kv_heads.size(), m, a.p.sink, info.prompt_len - a.p.window,
               info.prompt_len, c.queries_per_head, a.p.step_stride);
    fmt::print("  clustered share of the attention: {:.3f}; build {:.0f} ms per head\n", c.clustered, c.build_ms);
    fmt::print("{:>8} {:>10} {:>14} {:>14} {:>10}\n", "rank", "% clusters", "true (by cen.)", "estimate", "oracle");
    for (size_t i = 0; i < c.ranks.size(); ++i)
        if (c.ranks[i] <= 4 || i % 8 == 0 || i + 1 == c.ranks.size())
            fmt::print("{:>8} {:>10.2f} {:>14.4f} {:>14.4f} {:>10.4f}\n", c.ranks[i], 100.0 * c.ranks[i] / m,
                       c.cen_true[i], c.cen_est[i], c.oracle[i]);
    if (!a.json_out.empty()) {
        write_file_atomic(a.json_out, centroid_rank_json(a.trace, sel, info.prompt_len, a.p, c).dump(1) + "\n");
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
    sub->add_option("--sink", a->p.sink, "steady-zone sink tokens left out of the index (default 4)");
    sub->add_option("--window", a->p.window, "steady-zone local window left out of the index (default 64)");
    sub->add_option("--tokens-per-cluster", a->p.tokens_per_cluster, "tokens per centroid (default 16)");
    sub->add_option("--segment", a->p.segment, "k-means segment in tokens (default 8192)");
    sub->add_option("--iters", a->p.iters, "k-means assignment passes (default 10)");
    sub->add_option("--step-stride", a->p.step_stride, "use every n-th decode step (default 4)");
    sub->add_option("--threads", a->threads, "threads over heads (default: OpenMP's)");
    sub->add_option("--json", a->json_out, "write the curves to this JSON file (retro-bench plot reads it)");
    return std::function<int()>([a] { return run_cr(*a); });
});

}  // namespace
}  // namespace retro::cli
