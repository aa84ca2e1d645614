#include "analysis/ood_recall_run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "core/host.hpp"

namespace retro {

using json = nlohmann::json;

double scanned_at(const std::vector<double>& scanned, const std::vector<double>& recall, double target) {
    for (size_t i = 0; i < recall.size(); ++i) {
        if (!(recall[i] >= target)) continue;
        if (i == 0 || recall[i] == recall[i - 1]) return scanned[i];
        const double f = (target - recall[i - 1]) / (recall[i] - recall[i - 1]);
        return scanned[i - 1] + std::clamp(f, 0.0, 1.0) * (scanned[i] - scanned[i - 1]);
    }
    return std::numeric_limits<double>::quiet_NaN();
}

namespace {

// The per-head parameters from the invocation's options; ConfigError naming the option.
OodRecallParams params_of(const OodRecallArgs& a) {
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
    return p;
}

json num_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

json point_json(const OodRecallPoint& pt) {
    return {{"setting", pt.setting},
            {"value", pt.value},
            {"scanned_decode", num_or_null(pt.scanned_decode)},
            {"recall_decode", num_or_null(pt.recall_decode)},
            {"scanned_keys", num_or_null(pt.scanned_keys)},
            {"recall_keys", num_or_null(pt.recall_keys)}};
}

}  // namespace

OodRecallReport run_ood_recall(const OodRecallArgs& a) {
    OodRecallReport r;
    r.args = a;
    r.params = params_of(a);
    TraceReader reader(a.trace);
    r.prompt_len = reader.info().prompt_len;
    r.heads = select_heads(reader, a.trace, a.layers, a.kv_heads);
    r.head_refs = head_refs(r.heads);
    r.per_head = map_heads(reader, r.heads, a.threads, [&](const HeadSlice& s) { return ood_recall(s, r.params); });

    const auto& res = r.per_head;
    for (const auto& h : res) r.build_ms += h.build_ms;
    r.build_ms /= res.size();
    // mean over heads of each setting
    const size_t np = res[0].points.size();
    std::vector<double> sd(np, 0), rd(np, 0), sk(np, 0), rk(np, 0);
    for (const auto& h : res)
        for (size_t j = 0; j < np; ++j) {
            sd[j] += h.points[j].scanned_decode / res.size();
            rd[j] += h.points[j].recall_decode / res.size();
            sk[j] += h.points[j].scanned_keys / res.size();
            rk[j] += h.points[j].recall_keys / res.size();
        }
    for (size_t j = 0; j < np; ++j)
        r.mean.push_back({res[0].points[j].setting, res[0].points[j].value, sd[j], rd[j], sk[j], rk[j]});
    for (double target : {0.8, 0.9, 0.95}) r.reach.push_back({target, scanned_at(sd, rd, target), scanned_at(sk, rk, target)});
    return r;
}

json ood_recall_json(const OodRecallReport& r) {
    const OodRecallArgs& a = r.args;
    json points = json::array();
    for (const auto& m : r.mean) points.push_back(point_json(m));
    json reach = json::object();
    for (const auto& x : r.reach)
        reach[fmt::format("{:.2f}", x.target)] = {{"decode", num_or_null(x.decode)}, {"keys", num_or_null(x.keys)}};
    json heads = json::array();
    for (size_t i = 0; i < r.head_refs.size(); ++i) {
        const OodRecallResult& h = r.per_head[i];
        json pts = json::array();
        for (const auto& pt : h.points) pts.push_back(point_json(pt));
        heads.push_back({{"layer", r.head_refs[i].layer},
                         {"kv_head", r.head_refs[i].kv},
                         {"n_keys", h.n_keys},
                         {"n_decode", h.n_decode},
                         {"n_key_queries", h.n_key_queries},
                         {"nlist", h.nlist},
                         {"build_ms", h.build_ms},
                         {"points", pts}});
    }
    return {{"trace", a.trace},
            {"index", a.index},
            {"mips", a.mips},
            {"nlist", a.nlist},
            {"M", a.m},
            {"ef_construction", a.ef_construction},
            {"k", a.k},
            {"key_queries", a.key_queries},
            {"seed", a.seed},
            {"layers", r.heads.layers},
            {"kv_heads", r.heads.kv_heads},
            {"host", host_info()},
            {"mean", points},
            {"scanned_to_reach", reach},
            {"heads", heads}};
}

}  // namespace retro
