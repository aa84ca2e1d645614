#include "bench/backend_config.hpp"

#include <algorithm>
#include <set>

#include "bench/config.hpp"
#include "bench/gpu_job_params.hpp"
#include "core/error.hpp"
#include "core/json_keys.hpp"

namespace retro {

using json = nlohmann::json;

std::string parse_backend(const json& v, const std::string& where) {
    if (!v.is_string() || (v.get<std::string>() != "cpu" && v.get<std::string>() != "cuda"))
        throw ConfigError(where + ": backend = " + v.dump() + ": expected \"cpu\" or \"cuda\"");
    return v.get<std::string>();
}

namespace {

/// j[key]: one of `choices` or a list of distinct ones (a sweep axis). ConfigError naming where.key.
std::vector<std::string> choice_list(const json& j, const char* key, const std::vector<std::string>& choices,
                                     const std::string& where) {
    const json k = j[key].is_array() ? j[key] : json::array({j[key]});
    const std::string w = where + "." + key;
    if (k.empty()) throw ConfigError(w + ": empty list of values");
    std::string names;
    for (size_t i = 0; i < choices.size(); ++i)
        names += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + ("\"" + choices[i] + "\"");
    std::vector<std::string> out;
    for (const json& x : k) {
        if (!x.is_string() || std::find(choices.begin(), choices.end(), x.get<std::string>()) == choices.end())
            throw ConfigError(w + " = " + j[key].dump() + ": expected " + names + " (or a list of them)");
        if (std::find(out.begin(), out.end(), x.get<std::string>()) != out.end())
            throw ConfigError(w + " = " + j[key].dump() + ": duplicate entries");
        out.push_back(x.get<std::string>());
    }
    return out;
}

bool boolean(const json& j, const char* key, const std::string& where) {
    if (!j[key].is_boolean()) throw ConfigError(where + "." + key + " = " + j[key].dump() + ": expected true or false");
    return j[key].get<bool>();
}

}  // namespace

CudaOptions CudaOptions::from_json(const json& j, const std::string& where) {
    if (!j.is_object())
        throw ConfigError(where + ": expected an object {batch, kmeans, warmup, warm_steps, full_kernel, launch_gate, "
                                  "step_graph, wave_kv, device_gather, async_update, host_threads, sequences}");
    check_keys(j, {"batch", "kmeans", "warmup", "warm_steps", "full_kernel", "launch_gate", "step_graph", "wave_kv",
                   "device_gather", "async_update", "host_threads", "sequences"},
               where);
    CudaOptions o;
    if (j.contains("batch")) {
        const json b = j["batch"].is_array() ? j["batch"] : json::array({j["batch"]});
        if (b.empty()) throw ConfigError(where + ".batch: empty list of values");
        o.batch.clear();
        std::set<int> seen;
        for (const json& x : b) {
            if (!x.is_number_integer() || x.get<long long>() < 1 || x.get<long long>() > 4096)
                throw ConfigError(where + ".batch = " + j["batch"].dump() + ": expected integers in [1, 4096]");
            if (!seen.insert(x.get<int>()).second)
                throw ConfigError(where + ".batch = " + j["batch"].dump() + ": duplicate entries");
            o.batch.push_back(x.get<int>());
        }
    }
    if (j.contains("kmeans")) {
        const json& k = j["kmeans"];
        if (!k.is_string() || (k.get<std::string>() != "cpu" && k.get<std::string>() != "gpu"))
            throw ConfigError(where + ".kmeans = " + k.dump() + ": expected \"cpu\" or \"gpu\"");
        o.kmeans = k.get<std::string>();
    }
    if (j.contains("warmup")) {
        const json& w = j["warmup"];
        if (!w.is_number_integer() || w.get<long long>() < 0 || w.get<long long>() > 100)
            throw ConfigError(where + ".warmup = " + w.dump() + ": expected an integer in [0, 100]");
        o.warmup = w.get<int>();
    }
    if (j.contains("warm_steps")) {
        const json& w = j["warm_steps"];
        if (!w.is_number_integer() || w.get<long long>() < 0 || w.get<long long>() > 100000)
            throw ConfigError(where + ".warm_steps = " + w.dump() + ": expected an integer in [0, 100000]");
        o.warm_steps = w.get<int>();
    }
    if (j.contains("full_kernel")) o.full_kernel = choice_list(j, "full_kernel", {"flashinfer", "cudnn", "own"}, where);
    if (j.contains("launch_gate")) o.launch_gate = boolean(j, "launch_gate", where);
    if (j.contains("step_graph")) o.step_graph = boolean(j, "step_graph", where);
    if (j.contains("wave_kv")) o.wave_kv = choice_list(j, "wave_kv", {"host", "gpu"}, where);
    if (j.contains("device_gather")) o.device_gather = boolean(j, "device_gather", where);
    if (j.contains("async_update")) o.async_update = boolean(j, "async_update", where);
    if (o.async_update && !o.device_gather)
        throw ConfigError(where + ".async_update = true needs device_gather true (the update applied at the next "
                                  "step is the device path's: the host path looks the cache up before the attention)");
    if (j.contains("host_threads")) {
        const json& t = j["host_threads"];
        if (!t.is_number_integer() || t.get<long long>() < 0 || t.get<long long>() > 256)
            throw ConfigError(where + ".host_threads = " + t.dump() + ": expected an integer in [0, 256] (0: automatic)");
        o.host_threads = t.get<int>();
    }
    if (j.contains("sequences")) {
        const json& q = j["sequences"];
        if (!q.is_number_integer() || q.get<long long>() < 1 || q.get<long long>() > 64)
            throw ConfigError(where + ".sequences = " + q.dump() + ": expected an integer in [1, 64] (1: copies of one)");
        o.sequences = q.get<int>();
    }
    return o;
}

json CudaOptions::to_json() const {
    json j = {{"batch", batch}, {"kmeans", kmeans}, {"warmup", warmup}, {"full_kernel", full_kernel}};
    // the defaults left out: the manifests written before these keys stay the same
    if (!launch_gate) j["launch_gate"] = false;
    if (step_graph) j["step_graph"] = true;
    if (wave_kv != std::vector<std::string>{"host"}) j["wave_kv"] = wave_kv;
    if (!device_gather) j["device_gather"] = false;
    if (async_update) j["async_update"] = true;
    if (host_threads != 0) j["host_threads"] = host_threads;
    if (warm_steps != 0) j["warm_steps"] = warm_steps;
    if (sequences != 1) j["sequences"] = sequences;
    return j;
}

void check_cuda_run(const MethodRun& r, const CudaOptions& o, const std::string& where) {
    gpu_job_for(r, o, where);  // a GPU twin, and its check of the job's fields
    if (r.system.is_object() && r.system.value("policy", "lru") == "belady")
        throw ConfigError(where + ": backend 'cuda': system.policy \"belady\" needs the future; the GPU block cache "
                          "runs online (use lru, lfu, fifo or clock)");
}

}  // namespace retro
