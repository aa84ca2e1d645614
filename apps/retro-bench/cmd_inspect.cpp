// `retro-bench inspect TRACE`: shapes, attributes and attention statistics per layer x query head
// (docs/inspect.md). Reads one (layer, KV head) slice at a time, slices in parallel.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "analysis/head_selection.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"
#include "core/host.hpp"
#include "trace/reader.hpp"
#include "trace/stats.hpp"

namespace retro::cli {
namespace {

using json = nlohmann::json;

struct InspectArgs {
    std::string trace;
    std::string layers, kv_heads;
    int step_stride = 1;
    std::string json_out;
    bool no_stats = false;
    int threads = 0;
};

std::string num(double x, const char* f = "{:.3f}") {
    return std::isfinite(x) ? fmt::format(fmt::runtime(f), x) : std::string("-");
}

constexpr const char* kRowFmt =
    "{:<14} {:>6} {:>7} {:>6} {:>7} {:>5} {:>6} {:>6} {:>6} {:>6} {:>6} {:>5} {:>5} {:>6}";

std::string row(const QHeadStats& s, const std::string& label) {
    return fmt::format(kRowFmt, label, num(s.n50, "{:.0f}"), num(s.n90, "{:.0f}"), num(100 * s.f90, "{:.2f}"),
                       num(s.n99, "{:.0f}"), num(100 * s.f99, "{:.1f}"), num(s.top_mass), num(s.top_frac_mass),
                       num(s.static_top_frac_mass), num(s.overlap, "{:.2f}"), num(s.query_cos, "{:.3f}"),
                       num(s.sink_mass, "{:.2f}"), num(s.local_mass, "{:.2f}"), num(s.ood_ratio, "{:.1f}"));
}

json info_json(const TraceInfo& info) {
    json j = {{"path", info.path},
              {"version", info.version},
              {"model", info.model},
              {"source", info.source},
              {"dtype", dtype_name(info.dtype)},
              {"num_layers", info.num_layers},
              {"layers", info.layers},
              {"num_q_heads", info.num_q_heads},
              {"num_kv_heads", info.num_kv_heads},
              {"head_dim", info.head_dim},
              {"prompt_len", info.prompt_len},
              {"num_decode_steps", info.num_decode_steps},
              {"n_tokens", info.n_tokens()},
              {"num_prefill_queries", info.num_prefill_queries},
              {"prefill_first_position", info.prefill_first_position},
              {"rope_applied", info.rope_applied},
              {"rope_layout", info.rope_layout},
              {"rope_theta", info.rope_theta},
              {"extra", info.extra}};
    return j;
}

int run_inspect(const InspectArgs& a) {
    TraceReader reader(a.trace);
    const TraceInfo& info = reader.info();
    const int G = info.num_kv_heads, grp = info.group_size(), d = info.head_dim;

    const HeadSelection sel = select_heads(reader, a.trace, a.layers, a.kv_heads);
    const std::vector<int>& layers = sel.layers;
    if (a.step_stride < 1) throw ConfigError("--step-stride must be >= 1");

    std::error_code ec;
    const auto bytes = std::filesystem::file_size(a.trace, ec);
    fmt::print("trace {} ({:.1f} MiB)\n", a.trace, ec ? 0.0 : (double)bytes / (1024.0 * 1024.0));
    fmt::print("  format retro-trace v{}, model {}, dtype {}\n", info.version, info.model, dtype_name(info.dtype));
    fmt::print("  source {}\n", info.source.empty() ? "(none)" : info.source);
    fmt::print("  num_layers {} (present: {}), num_q_heads {}, num_kv_heads {} (GQA group {}), head_dim {}\n",
               info.num_layers, join_ints(info.layers), info.num_q_heads, G, grp, d);
    fmt::print("  prompt_len {}, num_decode_steps {}, n_tokens {}, prefill queries {}", info.prompt_len,
               info.num_decode_steps, info.n_tokens(), info.num_prefill_queries);
    if (info.num_prefill_queries > 0) fmt::print(" (first position {})", info.prefill_first_position);
    fmt::print("\n  rope_applied {}, rope_layout {}, rope_theta {:g}\n", info.rope_applied ? 1 : 0,
               info.rope_layout, info.rope_theta);
    fmt::print("  per layer: keys/values [{}, {}, {}], queries [{}, {}, {}]", G, info.n_tokens(), d,
               info.num_q_heads, info.num_decode_steps, d);
    if (info.num_prefill_queries > 0)
        fmt::print(", prefill_queries [{}, {}, {}]", info.num_q_heads, info.num_prefill_queries, d);
    fmt::print("\n");
    for (const auto& [k, v] : info.extra) fmt::print("  attribute {} = {}\n", k, v);
    const std::string blas = active_blas();
    fmt::print("  BLAS: {}\n", blas);

    json out = {{"trace", a.trace}, {"info", info_json(info)}, {"blas", blas}};
    if (a.no_stats) {
        if (!a.json_out.empty()) write_file_atomic(a.json_out, out.dump(2) + "\n");
        return 0;
    }

    StatsOptions opt;
    opt.step_stride = a.step_stride;
    const std::vector<HeadRef> jobs = head_refs(sel);
    const std::vector<std::vector<QHeadStats>> results =
        map_heads(reader, sel, a.threads, [&](const HeadSlice& s) { return head_stats(s, opt); });

    fmt::print("\nattention statistics per query head, mean over decode steps 0..{} stride {} ({} step(s)):\n"
               "  n50/n90/n99 tokens for 50/90/99% of the mass (f = fraction of the visible tokens); top1k = mass "
               "of the top {}; top1% = mass of the top {:g}% of tokens; st1% = mass of step 0's top {:g}% at later "
               "steps; ovl100 = top-{} overlap of consecutive steps; qcos = cosine of consecutive queries; sink = "
               "mass on the first {} tokens; local = mass on the last {}; ood = query/key Mahalanobis ratio\n",
               info.num_decode_steps - 1, opt.step_stride,
               (info.num_decode_steps + opt.step_stride - 1) / opt.step_stride, opt.top_mass_k, 100 * opt.top_frac,
               100 * opt.top_frac, opt.overlap_k, opt.sink_tokens, opt.local_tokens);
    fmt::print("{}\n", fmt::format(kRowFmt, "layer/qhead", "n50", "n90", "f90%", "n99", "f99%", "top1k", "top1%",
                                   "st1%", "ovl100", "qcos", "sink", "local", "ood"));
    std::vector<QHeadStats> all;
    json heads = json::array(), layer_means = json::array();
    for (int l : layers) {
        std::vector<QHeadStats> per;
        for (size_t i = 0; i < jobs.size(); ++i)
            if (jobs[i].layer == l)
                for (const auto& s : results[i]) per.push_back(s);
        std::sort(per.begin(), per.end(), [](auto& x, auto& y) { return x.q_head < y.q_head; });
        for (const auto& s : per) {
            fmt::print("{}\n", row(s, fmt::format("L{} q{} kv{}", s.layer, s.q_head, s.kv_head)));
            heads.push_back(to_json(s));
        }
        const QHeadStats m = mean_stats(per);
        fmt::print("{}\n", row(m, fmt::format("L{} mean", l)));
        json mj = to_json(m);
        mj["layer"] = l;
        mj["heads"] = per.size();
        layer_means.push_back(mj);
        all.insert(all.end(), per.begin(), per.end());
    }
    const QHeadStats overall = mean_stats(all);
    fmt::print("{}\n", row(overall, "all mean"));
    fmt::print("Mahalanobis: queries {} / keys {} (mean distance from the prompt keys' Gaussian); key mean / "
               "spread {}\n",
               num(overall.q_mahal, "{:.1f}"), num(overall.k_mahal, "{:.1f}"), num(overall.key_mean_ratio, "{:.2f}"));
    fmt::print("Key positional locality: centered-key cosine {} at distance {}, {} at distance {}\n",
               num(overall.key_cos_near, "{:.3f}"), opt.locality_near, num(overall.key_cos_far, "{:.3f}"),
               opt.locality_far);
    if (!a.json_out.empty()) {
        json o = to_json(overall);
        o["heads"] = all.size();
        out["options"] = {{"step_stride", opt.step_stride}, {"sink_tokens", opt.sink_tokens},
                          {"local_tokens", opt.local_tokens}, {"top_mass_k", opt.top_mass_k},
                          {"overlap_k", opt.overlap_k},       {"top_frac", opt.top_frac},
                          {"ridge", opt.ridge},               {"locality_near", opt.locality_near},
                          {"locality_far", opt.locality_far}};
        out["heads"] = heads;
        out["layers"] = layer_means;
        out["overall"] = o;
        write_file_atomic(a.json_out, out.dump(2) + "\n");
        fmt::print("wrote {}\n", a.json_out);
    }
    return 0;
}

const CommandRegistrar reg(30, [](CLI::App& app) {
    auto a = std::make_shared<InspectArgs>();
    auto* sub = app.add_subcommand("inspect", "Show a trace's shapes, attributes and attention statistics");
    sub->add_option("trace", a->trace, "trace file (.h5)")->required();
    sub->add_option("--layers", a->layers, "comma-separated layers (default: all in the file)");
    sub->add_option("--kv-heads", a->kv_heads, "comma-separated KV heads (default: all)");
    sub->add_option("--step-stride", a->step_stride, "use every N-th decode step (default 1: all)");
    sub->add_option("--json", a->json_out, "also write the statistics to this JSON file");
    sub->add_flag("--no-stats", a->no_stats, "only shapes and attributes");
    sub->add_option("--threads", a->threads, "threads over heads (default: OpenMP's)");
    return std::function<int()>([a] { return run_inspect(*a); });
});

}  // namespace
}  // namespace retro::cli
