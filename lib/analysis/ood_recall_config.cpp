#include "analysis/ood_recall_config.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <set>

#include "bench/results_lock.hpp"
#include "bench/runner.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"
#include "core/json_keys.hpp"

namespace retro {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

void check_object_keys(const json& j, const std::set<std::string>& allowed, const std::string& where) {
    if (!j.is_object()) throw ConfigError(where + ": expected an object");
    check_keys(j, allowed, where);
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

OodRecallExperiment parse_ood_recall_config(const json& j, const std::string& origin) {
    const std::string& w = origin;
    check_object_keys(j, {"name", "experiment", "description", "figure", "traces", "layers", "kv_heads", "k",
                          "key_queries", "seed", "threads", "indexes"},
                      w);
    // Traces and the head selection go through the run-config parser (same keys, same checks, synth
    // recipes), with a placeholder method.
    json base = {{"name", j.value("name", "")}, {"methods", json::array({{{"name", "full"}}})}};
    for (const char* key : {"description", "traces", "layers", "kv_heads"})
        if (j.contains(key)) base[key] = j[key];
    OodRecallExperiment e{parse_config(base, origin), {}};
    if (!j.contains("indexes") || !j["indexes"].is_array() || j["indexes"].empty())
        throw ConfigError(w + ": indexes: expected a non-empty list of {\"index\": \"ivf\"|\"hnsw\"|\"flat\", ...}");

    OodRecallArgs common;
    common.k = int_of(j, "k", common.k, 1, w);
    common.key_queries = int_of(j, "key_queries", common.key_queries, 0, w);
    common.seed = (unsigned)int_of(j, "seed", (int)common.seed, 0, w);
    common.threads = int_of(j, "threads", 0, 0, w);
    common.layers = join_ints(e.config.layers);
    common.kv_heads = join_ints(e.config.kv_heads);
    for (size_t i = 0; i < j["indexes"].size(); ++i) {
        const json& x = j["indexes"][i];
        const std::string ew = w + ": indexes[" + std::to_string(i) + "]";
        check_object_keys(x, {"index", "mips", "nlist", "nprobe", "M", "ef_construction", "ef"}, ew);
        OodRecallArgs a = common;
        a.index = str_of(x, "index", a.index, ew);
        a.mips = str_of(x, "mips", a.mips, ew);
        a.nlist = int_of(x, "nlist", a.nlist, 1, ew);
        a.nprobe = int_list_of(x, "nprobe", a.nprobe, ew);
        a.m = int_of(x, "M", a.m, 2, ew);
        a.ef_construction = int_of(x, "ef_construction", a.ef_construction, 1, ew);
        a.ef = int_list_of(x, "ef", a.ef, ew);
        if (a.index != "ivf" && a.index != "hnsw" && a.index != "flat")
            throw ConfigError(ew + ": index = \"" + a.index + "\": expected ivf, hnsw or flat");
        if (a.mips != "ip" && a.mips != "l2_transform")
            throw ConfigError(ew + ": mips = \"" + a.mips + "\": expected ip or l2_transform");
        e.entries.push_back(a);
    }
    return e;
}

OodRecallConfigCounts run_ood_recall_config(const OodRecallExperiment& e, const OodRecallConfigRun& opt,
                                            const std::function<void(const std::string&)>& progress,
                                            const std::function<void(const OodRecallReport&, const std::string&)>& written) {
    const std::string dir = (fs::path(opt.results_root) / e.config.name).string();
    ResultsLockRequest lock_req;  // one writer at a time, as run_config (bench/results_lock.hpp)
    lock_req.wait = opt.wait_lock;
    lock_req.command = "retro-bench run (ood-recall config " + e.config.name + ")";
    const ResultsLock lock(dir, lock_req);
    if (!holds_only_lock_files(dir)) {
        if (opt.force)
            clear_locked_dir(lock);
        else if (!opt.resume)
            throw ConfigError(dir + " already holds results: pass --resume to continue it or --force to "
                                    "start over");
    }
    clean_temp_files(lock);
    const auto traces = prepare_traces(e.config, true, progress);
    OodRecallConfigCounts n;
    for (const auto& t : traces) {
        const std::string stem = fs::path(t.spec.path).stem().string();
        for (OodRecallArgs a : e.entries) {
            a.trace = t.spec.path;
            if (opt.threads >= 0) a.threads = opt.threads;
            const std::string file =
                (fs::path(dir) / fmt::format("ood-recall-{}{}-{}.json", a.index, a.mips == "ip" ? "" : "-" + a.mips, stem))
                    .string();
            if (opt.resume && file_exists(file)) {
                ++n.skipped;
                continue;
            }
            const OodRecallReport r = run_ood_recall(a);
            write_file_atomic(file, ood_recall_json(r).dump(2) + "\n");
            if (written) written(r, file);
            ++n.written;
        }
    }
    return n;
}

}  // namespace retro
