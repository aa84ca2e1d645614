// `retro-bench run CONFIG` for "experiment": "ood-recall" configs (configs/paper/ood-recall.json): the
// ood-recall command replayed for every trace x index entry, one JSON file each in the results
// directory. docs/config.md ("ood-recall experiment").
#include <fmt/format.h>

#include <filesystem>
#include <set>

#include "bench/config.hpp"
#include "bench/runner.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"
#include "head_args.hpp"
#include "ood_recall_cmd.hpp"

namespace retro::cli {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

void check_keys(const json& j, const std::set<std::string>& allowed, const std::string& where) {
    if (!j.is_object()) throw ConfigError(where + ": expected an object");
    for (auto it = j.begin(); it != j.end(); ++it)
        if (!allowed.count(it.key())) {
            std::string known;
            for (const auto& k : allowed) known += (known.empty() ? "" : ", ") + k;
            throw ConfigError(where + ": unknown key '" + it.key() + "' (allowed: " + known + ")");
        }
}

int int_of(const json& j, const char* key, int dflt, int lo, const std::string& where) {
    if (!j.contains(key)) return dflt;
    const json& v = j.at(key);
    if (!v.is_number_integer() || v.get<long long>() < lo)
        throw ConfigError(where + ": " + key + " = " + v.dump() + ": expected an integer >= " + std::to_string(lo));
    return (int)v.get<long long>();
}

std::string str_of(const json& j, const char* key, const std::string& dflt, const std::string& where) {
    if (!j.contains(key)) return dflt;
    if (!j.at(key).is_string()) throw ConfigError(where + ": " + key + " = " + j.at(key).dump() + ": expected a string");
    return j.at(key).get<std::string>();
}

// [1, 2, 4] -> "1,2,4" (each an integer >= 1)
std::string int_list_of(const json& j, const char* key, const std::string& dflt, const std::string& where) {
    if (!j.contains(key)) return dflt;
    const json& v = j.at(key);
    if (!v.is_array() || v.empty()) throw ConfigError(where + ": " + key + " = " + v.dump() + ": expected a non-empty list");
    std::vector<int> out;
    for (const auto& x : v) {
        if (!x.is_number_integer() || x.get<long long>() < 1)
            throw ConfigError(where + ": " + key + " = " + v.dump() + ": expected integers >= 1");
        out.push_back((int)x.get<long long>());
    }
    return join_ints(out);
}

}  // namespace

bool is_ood_recall_config(const json& j) {
    return j.is_object() && j.contains("experiment") && j["experiment"].is_string() &&
           j["experiment"].get<std::string>() == "ood-recall";
}

int run_ood_config(const json& j, const std::string& origin, const OodConfigRun& opt) {
    const std::string w = origin;
    check_keys(j, {"name", "experiment", "description", "figure", "traces", "layers", "kv_heads", "k", "key_queries",
                   "seed", "threads", "indexes"},
               w);
    if (opt.resume && opt.force) throw ConfigError("--resume and --force exclude each other");
    // Traces and the head selection go through the run-config parser (same keys, same checks, synth
    // recipes), with a placeholder method.
    json base = {{"name", j.value("name", "")}, {"methods", json::array({{{"name", "full"}}})}};
    for (const char* key : {"description", "traces", "layers", "kv_heads"})
        if (j.contains(key)) base[key] = j[key];
    const RunConfig cfg = parse_config(base, origin);
    if (!j.contains("indexes") || !j["indexes"].is_array() || j["indexes"].empty())
        throw ConfigError(w + ": indexes: expected a non-empty list of {\"index\": \"ivf\"|\"hnsw\"|\"flat\", ...}");

    OodArgs common;
    common.k = int_of(j, "k", common.k, 1, w);
    common.key_queries = int_of(j, "key_queries", common.key_queries, 0, w);
    common.seed = (unsigned)int_of(j, "seed", (int)common.seed, 0, w);
    common.threads = opt.threads >= 0 ? opt.threads : int_of(j, "threads", 0, 0, w);
    common.layers = join_ints(cfg.layers);
    common.kv_heads = join_ints(cfg.kv_heads);
    std::vector<OodArgs> entries;
    for (size_t i = 0; i < j["indexes"].size(); ++i) {
        const json& e = j["indexes"][i];
        const std::string ew = w + ": indexes[" + std::to_string(i) + "]";
        check_keys(e, {"index", "mips", "nlist", "nprobe", "M", "ef_construction", "ef"}, ew);
        OodArgs a = common;
        a.index = str_of(e, "index", a.index, ew);
        a.mips = str_of(e, "mips", a.mips, ew);
        a.nlist = int_of(e, "nlist", a.nlist, 1, ew);
        a.nprobe = int_list_of(e, "nprobe", a.nprobe, ew);
        a.m = int_of(e, "M", a.m, 2, ew);
        a.ef_construction = int_of(e, "ef_construction", a.ef_construction, 1, ew);
        a.ef = int_list_of(e, "ef", a.ef, ew);
        if (a.index != "ivf" && a.index != "hnsw" && a.index != "flat")
            throw ConfigError(ew + ": index = \"" + a.index + "\": expected ivf, hnsw or flat");
        if (a.mips != "ip" && a.mips != "l2_transform")
            throw ConfigError(ew + ": mips = \"" + a.mips + "\": expected ip or l2_transform");
        entries.push_back(a);
    }

    if (opt.validate_only) {
        const auto traces = prepare_traces(cfg, false);
        fmt::print("{}: OK ood-recall config '{}': {} index setting(s)\n", origin, cfg.name, entries.size());
        for (const auto& a : entries)
            fmt::print("  {} {}\n", a.index,
                       a.index == "ivf"    ? fmt::format("mips {} nlist {} nprobe {}", a.mips, a.nlist, a.nprobe)
                       : a.index == "hnsw" ? fmt::format("mips {} M {} efConstruction {} ef {}", a.mips, a.m,
                                                         a.ef_construction, a.ef)
                                           : fmt::format("mips {}", a.mips));
        for (const auto& t : traces)
            fmt::print("  trace {}{}: {} layer(s) x {} KV head(s)\n", t.spec.path,
                       t.generation_note(), t.layers.size(),
                       t.kv_heads.size());
        return 0;
    }
    const std::string dir = (fs::path(opt.results_root) / cfg.name).string();
    if (fs::exists(dir) && !fs::is_empty(dir)) {
        if (opt.force)
            fs::remove_all(dir);
        else if (!opt.resume)
            throw ConfigError(dir + " already holds results: pass --resume to continue it or --force to "
                                    "start over");
    }
    fs::create_directories(dir);
    const auto traces =
        prepare_traces(cfg, true, [](const std::string& s) { fmt::print(stderr, "{}\n", s); });
    int done = 0, skipped = 0;
    for (const auto& t : traces) {
        const std::string stem = fs::path(t.spec.path).stem().string();
        for (OodArgs a : entries) {
            a.trace = t.spec.path;
            a.json_out = (fs::path(dir) / fmt::format("ood-recall-{}{}-{}.json", a.index,
                                                        a.mips == "ip" ? "" : "-" + a.mips, stem))
                             .string();
            if (opt.resume && file_exists(a.json_out)) {
                ++skipped;
                continue;
            }
            const int rc = run_ood(a);
            if (rc != 0) return rc;
            fmt::print("\n");
            ++done;
        }
    }
    fmt::print("{}: {} ood-recall file(s) written, {} already present; plot with `retro-bench plot {}`\n", cfg.name,
               done, skipped, dir);
    return 0;
}

}  // namespace retro::cli
