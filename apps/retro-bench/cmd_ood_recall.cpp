// `retro-bench ood-recall TRACE`: recall@k vs. scanned fraction of a FAISS index over each head's prompt
// keys, searched with the decode queries and with sampled keys as queries (RetrievalAttention Fig. 3a/6:
// the out-of-distribution gap). docs/methods/faiss.md.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "commands.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"
#include "core/host.hpp"
#include "head_args.hpp"
#include "methods/ood_recall.hpp"
#include "ood_recall_cmd.hpp"
#include "trace/reader.hpp"

namespace retro::cli {
namespace {

using json = nlohmann::json;

// Smallest scanned fraction at which the curve reaches `target` recall, interpolating linearly between
// settings; NaN when it never does.
double scanned_at(const std::vector<double>& scanned, const std::vector<double>& recall, double target) {
    for (size_t i = 0; i < recall.size(); ++i) {
        if (!(recall[i] >= target)) continue;
        if (i == 0 || recall[i] == recall[i - 1]) return scanned[i];
        const double f = (target - recall[i - 1]) / (recall[i] - recall[i - 1]);
        return scanned[i - 1] + std::clamp(f, 0.0, 1.0) * (scanned[i] - scanned[i - 1]);
    }
    return std::numeric_limits<double>::quiet_NaN();
}

json num_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

std::string pct(double x) { return std::isfinite(x) ? fmt::format("{:.2f}", 100 * x) : "-"; }
std::string fix(double x) { return std::isfinite(x) ? fmt::format("{:.3f}", x) : "-"; }

}  // namespace

int run_ood(const OodArgs& a) {
    OodRecallParams p;
    try {
        p.index.kind = parse_ann_kind(a.index);
        p.index.mips = parse_mips(a.mips);
    } catch (const ParamError& e) {
        throw ConfigError(std::string("--index/--mips: ") + e.what());
    }
    if (a.nlist < 1) throw ConfigError("--nlist must be >= 1");
    if (a.m < 2) throw ConfigError("--M must be >= 2");
    if (a.ef_construction < 1) throw ConfigError("--ef-construction must be >= 1");
    if (a.k < 1) throw ConfigError("--k must be >= 1");
    if (a.key_queries < 0) throw ConfigError("--key-queries must be >= 0");
    p.index.nlist = a.nlist;
    p.index.hnsw_m = a.m;
    p.index.ef_construction = a.ef_construction;
    p.nprobe = parse_int_list(a.nprobe, "nprobe");
    p.ef_search = parse_int_list(a.ef, "ef");
    for (int x : p.nprobe)
        if (x < 1) throw ConfigError("--nprobe: values must be >= 1");
    for (int x : p.ef_search)
        if (x < 1) throw ConfigError("--ef: values must be >= 1");
    p.k = a.k;
    p.key_queries = a.key_queries;
    p.seed = a.seed;

    TraceReader reader(a.trace);
    const TraceInfo& info = reader.info();
    const HeadSelection sel = select_heads(reader, a.trace, a.layers, a.kv_heads);
    const std::vector<int>& layers = sel.layers;
    const std::vector<int>& kvs = sel.kv_heads;

    const std::vector<HeadRef> jobs = head_refs(sel);
    const std::vector<OodRecallResult> res =
        map_heads(reader, sel, a.threads, [&](const HeadSlice& s) { return ood_recall(s, p); });

    const std::string setting_desc =
        p.index.kind == AnnKind::ivf    ? fmt::format("IVF-Flat nlist {} (built: {})", a.nlist, res[0].nlist)
        : p.index.kind == AnnKind::hnsw ? fmt::format("HNSW-Flat M {} efConstruction {}", a.m, a.ef_construction)
                                        : std::string("Flat (exact)");
    fmt::print("ood-recall {}: {} x {} head(s), {} prompt keys, index {}, mips {}, recall@{}\n", a.trace,
               layers.size(), kvs.size(), info.prompt_len, setting_desc, mips_name(p.index.mips), a.k);
    fmt::print("  queries per head: {} decode (Q->K), {} sampled keys (K->K, the key itself excluded)\n",
               res[0].n_decode, res[0].n_key_queries);
    double build = 0;
    for (const auto& r : res) build += r.build_ms;
    fmt::print("  index build: {:.0f} ms per head (mean)\n\n", build / res.size());

    // Mean over heads of each setting.
    const size_t np = res[0].points.size();
    std::vector<double> sd(np, 0), rd(np, 0), sk(np, 0), rk(np, 0);
    for (const auto& r : res)
        for (size_t j = 0; j < np; ++j) {
            sd[j] += r.points[j].scanned_decode / res.size();
            rd[j] += r.points[j].recall_decode / res.size();
            sk[j] += r.points[j].scanned_keys / res.size();
            rk[j] += r.points[j].recall_keys / res.size();
        }
    fmt::print("{:<14} {:>14} {:>14} {:>14} {:>14}\n", "setting", "Q->K scanned%", fmt::format("Q->K recall@{}", a.k),
               "K->K scanned%", fmt::format("K->K recall@{}", a.k));
    json points = json::array();
    for (size_t j = 0; j < np; ++j) {
        fmt::print("{:<14} {:>14} {:>14} {:>14} {:>14}\n", res[0].points[j].setting, pct(sd[j]), fix(rd[j]),
                   pct(sk[j]), fix(rk[j]));
        points.push_back({{"setting", res[0].points[j].setting},
                          {"value", res[0].points[j].value},
                          {"scanned_decode", num_or_null(sd[j])},
                          {"recall_decode", num_or_null(rd[j])},
                          {"scanned_keys", num_or_null(sk[j])},
                          {"recall_keys", num_or_null(rk[j])}});
    }
    json reach = json::object();
    fmt::print("\nscanned fraction to reach a recall (interpolated between settings; - = not reached):\n");
    for (double target : {0.8, 0.9, 0.95}) {
        const double a1 = scanned_at(sd, rd, target), a2 = scanned_at(sk, rk, target);
        fmt::print("  recall {:.2f}: Q->K {}%, K->K {}%\n", target, pct(a1), pct(a2));
        reach[fmt::format("{:.2f}", target)] = {{"decode", num_or_null(a1)}, {"keys", num_or_null(a2)}};
    }

    if (!a.json_out.empty()) {
        json heads = json::array();
        for (size_t i = 0; i < jobs.size(); ++i) {
            json pts = json::array();
            for (const auto& pt : res[i].points)
                pts.push_back({{"setting", pt.setting},
                               {"value", pt.value},
                               {"scanned_decode", num_or_null(pt.scanned_decode)},
                               {"recall_decode", num_or_null(pt.recall_decode)},
                               {"scanned_keys", num_or_null(pt.scanned_keys)},
                               {"recall_keys", num_or_null(pt.recall_keys)}});
            heads.push_back({{"layer", jobs[i].layer},
                             {"kv_head", jobs[i].kv},
                             {"n_keys", res[i].n_keys},
                             {"n_decode", res[i].n_decode},
                             {"n_key_queries", res[i].n_key_queries},
                             {"nlist", res[i].nlist},
                             {"build_ms", res[i].build_ms},
                             {"points", pts}});
        }
        json out = {{"trace", a.trace},
                    {"index", a.index},
                    {"mips", a.mips},
                    {"nlist", a.nlist},
                    {"M", a.m},
                    {"ef_construction", a.ef_construction},
                    {"k", a.k},
                    {"key_queries", a.key_queries},
                    {"seed", a.seed},
                    {"layers", layers},
                    {"kv_heads", kvs},
                    {"host", host_info()},
                    {"mean", points},
                    {"scanned_to_reach", reach},
                    {"heads", heads}};
        write_file_atomic(a.json_out, out.dump(2) + "\n");
        fmt::print("wrote {}\n", a.json_out);
    }
    return 0;
}

namespace {

const CommandRegistrar reg(60, [](CLI::App& app) {
    auto a = std::make_shared<OodArgs>();
    auto* sub = app.add_subcommand(
        "ood-recall", "Recall vs. scanned fraction of a FAISS index with decode queries and with keys as queries");
    sub->add_option("trace", a->trace, "trace file (.h5)")->required();
    sub->add_option("--index", a->index, "flat|ivf|hnsw (default ivf)");
    sub->add_option("--mips", a->mips, "ip|l2_transform (default ip)");
    sub->add_option("--nlist", a->nlist, "IVF lists (default 512)");
    sub->add_option("--nprobe", a->nprobe, "IVF nprobe values, comma-separated");
    sub->add_option("--M", a->m, "HNSW M (default 32)");
    sub->add_option("--ef-construction", a->ef_construction, "HNSW efConstruction (default 40)");
    sub->add_option("--ef", a->ef, "HNSW efSearch values, comma-separated");
    sub->add_option("--k", a->k, "recall@k (default 100)");
    sub->add_option("--key-queries", a->key_queries, "prompt keys sampled as queries per head (default 256)");
    sub->add_option("--seed", a->seed, "key sampling seed (default 1)");
    sub->add_option("--layers", a->layers, "comma-separated layers (default: all in the file)");
    sub->add_option("--kv-heads", a->kv_heads, "comma-separated KV heads (default: all)");
    sub->add_option("--threads", a->threads, "threads over heads (default: OpenMP's)");
    sub->add_option("--json", a->json_out, "also write the curves (mean and per head) to this JSON file");
    return std::function<int()>([a] { return run_ood(*a); });
});

}  // namespace
}  // namespace retro::cli
