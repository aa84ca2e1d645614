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

CudaOptions CudaOptions::from_json(const json& j, const std::string& where) {
    if (!j.is_object())
        throw ConfigError(where + ": expected an object {batch, kmeans, warmup, full_kernel, launch_gate}");
    check_keys(j, {"batch", "kmeans", "warmup", "full_kernel", "launch_gate"}, where);
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
    if (j.contains("full_kernel")) {
        const json k = j["full_kernel"].is_array() ? j["full_kernel"] : json::array({j["full_kernel"]});
        if (k.empty()) throw ConfigError(where + ".full_kernel: empty list of values");
        o.full_kernel.clear();
        for (const json& x : k) {
            const bool known = x.is_string() && (x.get<std::string>() == "flashinfer" ||
                                                 x.get<std::string>() == "cudnn" || x.get<std::string>() == "own");
            if (!known)
                throw ConfigError(where + ".full_kernel = " + j["full_kernel"].dump() +
                                  ": expected \"flashinfer\", \"cudnn\" or \"own\" (or a list of them)");
            if (std::find(o.full_kernel.begin(), o.full_kernel.end(), x.get<std::string>()) != o.full_kernel.end())
                throw ConfigError(where + ".full_kernel = " + j["full_kernel"].dump() + ": duplicate entries");
            o.full_kernel.push_back(x.get<std::string>());
        }
    }
    if (j.contains("launch_gate")) {
        if (!j["launch_gate"].is_boolean())
            throw ConfigError(where + ".launch_gate = " + j["launch_gate"].dump() + ": expected true or false");
        o.launch_gate = j["launch_gate"].get<bool>();
    }
    return o;
}

json CudaOptions::to_json() const {
    json j = {{"batch", batch}, {"kmeans", kmeans}, {"warmup", warmup}, {"full_kernel", full_kernel}};
    if (!launch_gate) j["launch_gate"] = false;  // the default left out: the manifests written before it stay the same
    return j;
}

void check_cuda_run(const MethodRun& r, const CudaOptions& o, const std::string& where) {
    gpu_job_for(r, o, where);  // a GPU twin, and its check of the job's fields
    if (r.system.is_object() && r.system.value("policy", "lru") == "belady")
        throw ConfigError(where + ": backend 'cuda': system.policy \"belady\" needs the future; the GPU block cache "
                          "runs online (use lru, lfu, fifo or clock)");
}

}  // namespace retro
