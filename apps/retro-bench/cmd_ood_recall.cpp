// `retro-bench ood-recall TRACE`: recall@k vs. scanned fraction of a FAISS index over each head's prompt
// keys, searched with the decode queries and with sampled keys as queries (RetrievalAttention Fig. 3a/6:
// the out-of-distribution gap). docs/methods/faiss.md. The computation is lib/analysis/ood_recall_run.hpp
// (one trace) and ood_recall_config.hpp (configs); this file parses the arguments and prints.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "analysis/ood_recall_config.hpp"
#include "analysis/ood_recall_run.hpp"
#include "bench/runner.hpp"
#include "commands.hpp"
#include "core/fs.hpp"
#include "ood_recall_cmd.hpp"

namespace retro::cli {
namespace {

std::string pct(double x) { return std::isfinite(x) ? fmt::format("{:.2f}", 100 * x) : "-"; }
std::string fix(double x) { return std::isfinite(x) ? fmt::format("{:.3f}", x) : "-"; }

void print_ood(const OodRecallReport& r) {
    const OodRecallArgs& a = r.args;
    const std::string setting_desc =
        r.params.index.kind == AnnKind::ivf
            ? fmt::format("IVF-Flat nlist {} (built: {})", a.nlist, r.per_head[0].nlist)
        : r.params.index.kind == AnnKind::hnsw ? fmt::format("HNSW-Flat M {} efConstruction {}", a.m, a.ef_construction)
                                               : std::string("Flat (exact)");
    fmt::print("ood-recall {}: {} x {} head(s), {} prompt keys, index {}, mips {}, recall@{}\n", a.trace,
               r.heads.layers.size(), r.heads.kv_heads.size(), r.prompt_len, setting_desc,
               mips_name(r.params.index.mips), a.k);
    fmt::print("  queries per head: {} decode (Q->K), {} sampled keys (K->K, the key itself excluded)\n",
               r.per_head[0].n_decode, r.per_head[0].n_key_queries);
    fmt::print("  index build: {:.0f} ms per head (mean)\n\n", r.build_ms);
    fmt::print("{:<14} {:>14} {:>14} {:>14} {:>14}\n", "setting", "Q->K scanned%", fmt::format("Q->K recall@{}", a.k),
               "K->K scanned%", fmt::format("K->K recall@{}", a.k));
    for (const auto& m : r.mean)
        fmt::print("{:<14} {:>14} {:>14} {:>14} {:>14}\n", m.setting, pct(m.scanned_decode), fix(m.recall_decode),
                   pct(m.scanned_keys), fix(m.recall_keys));
    fmt::print("\nscanned fraction to reach a recall (interpolated between settings; - = not reached):\n");
    for (const auto& x : r.reach)
        fmt::print("  recall {:.2f}: Q->K {}%, K->K {}%\n", x.target, pct(x.decode), pct(x.keys));
}

struct OodArgs {
    OodRecallArgs run;
    std::string json_out;  ///< also write the curves here (empty: print only)
};

int run_ood(const OodArgs& a) {
    const OodRecallReport r = run_ood_recall(a.run);
    print_ood(r);
    if (!a.json_out.empty()) {
        write_file_atomic(a.json_out, ood_recall_json(r).dump(2) + "\n");
        fmt::print("wrote {}\n", a.json_out);
    }
    return 0;
}

void print_entries(const std::string& origin, const OodRecallExperiment& e) {
    fmt::print("{}: OK ood-recall config '{}': {} index setting(s)\n", origin, e.config.name, e.entries.size());
    for (const auto& a : e.entries)
        fmt::print("  {} {}\n", a.index,
                   a.index == "ivf"    ? fmt::format("mips {} nlist {} nprobe {}", a.mips, a.nlist, a.nprobe)
                   : a.index == "hnsw" ? fmt::format("mips {} M {} efConstruction {} ef {}", a.mips, a.m,
                                                     a.ef_construction, a.ef)
                                       : fmt::format("mips {}", a.mips));
}

}  // namespace

int run_ood_config(const nlohmann::json& j, const std::string& origin, const OodConfigRun& opt) {
    const OodRecallExperiment e = parse_ood_recall_config(j, origin);
    if (opt.validate_only) {
        const auto traces = prepare_traces(e.config, false);
        print_entries(origin, e);
        for (const auto& t : traces)
            fmt::print("  trace {}{}: {} layer(s) x {} KV head(s)\n", t.spec.path, t.generation_note(),
                       t.layers.size(), t.kv_heads.size());
        return 0;
    }
    const OodRecallConfigCounts n = run_ood_recall_config(
        e, OodRecallConfigRun{.results_root = opt.results_root, .resume = opt.resume, .force = opt.force,
                              .wait_lock = opt.wait_lock, .threads = opt.threads},
        [quiet = opt.quiet](const std::string& s) {
            if (!quiet) fmt::print(stderr, "{}\n", s);
        },
        [](const OodRecallReport& r, const std::string& file) {
            print_ood(r);
            fmt::print("wrote {}\n\n", file);
        });
    fmt::print("{}: {} ood-recall file(s) written, {} already present; plot with `retro-bench plot {}`\n",
               e.config.name, n.written, n.skipped, (std::filesystem::path(opt.results_root) / e.config.name).string());
    return 0;
}

namespace {

const CommandRegistrar reg(60, [](CLI::App& app) {
    auto a = std::make_shared<OodArgs>();
    OodRecallArgs& r = a->run;
    auto* sub = app.add_subcommand(
        "ood-recall", "Recall vs. scanned fraction of a FAISS index with decode queries and with keys as queries");
    sub->add_option("trace", r.trace, "trace file (.h5)")->required();
    sub->add_option("--index", r.index, "flat|ivf|hnsw (default ivf)");
    sub->add_option("--mips", r.mips, "ip|l2_transform (default ip)");
    sub->add_option("--nlist", r.nlist, "IVF lists (default 512)");
    sub->add_option("--nprobe", r.nprobe, "IVF nprobe values, comma-separated");
    sub->add_option("--M", r.m, "HNSW M (default 32)");
    sub->add_option("--ef-construction", r.ef_construction, "HNSW efConstruction (default 40)");
    sub->add_option("--ef", r.ef, "HNSW efSearch values, comma-separated");
    sub->add_option("--k", r.k, "recall@k (default 100)");
    sub->add_option("--key-queries", r.key_queries, "prompt keys sampled as queries per head (default 256)");
    sub->add_option("--seed", r.seed, "key sampling seed (default 1)");
    sub->add_option("--layers", r.layers, "comma-separated layers (default: all in the file)");
    sub->add_option("--kv-heads", r.kv_heads, "comma-separated KV heads (default: all)");
    sub->add_option("--threads", r.threads, "threads over heads (default: OpenMP's)");
    sub->add_option("--json", a->json_out, "also write the curves (mean and per head) to this JSON file");
    return std::function<int()>([a] { return run_ood(*a); });
});

}  // namespace
}  // namespace retro::cli
