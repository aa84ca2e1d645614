#include "bench/config.hpp"

#include <algorithm>
#include <regex>
#include <set>

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/json_keys.hpp"
#include "gpu/gpu_methods.hpp"
#include "methods/params.hpp"
#include "system/cost_model.hpp"
#include "system/system_params.hpp"

namespace retro {

using json = nlohmann::json;

std::vector<int> StepSelection::resolve(int num_steps) const {
    if (first < 0 || first >= num_steps)
        throw ConfigError("steps.first = " + std::to_string(first) + " but the trace has " +
                          std::to_string(num_steps) + " decode steps (valid: 0.." +
                          std::to_string(num_steps - 1) + ")");
    std::vector<int> out;
    for (int t = first; t < num_steps && (count < 0 || (int)out.size() < count); t += stride)
        out.push_back(t);
    if (count >= 0 && (int)out.size() < count)
        throw ConfigError("steps asks for " + std::to_string(count) + " steps from " +
                          std::to_string(first) + " with stride " + std::to_string(stride) +
                          " but the trace has only " + std::to_string(num_steps) + " decode steps");
    return out;
}

std::string MethodRun::label() const {
    std::string s = method + "(";
    bool first = true;
    for (auto it = params.begin(); it != params.end(); ++it) {
        s += (first ? "" : ",") + it.key() + "=" + (it->is_string() ? it->get<std::string>() : it->dump());
        first = false;
    }
    s += ")";
    if (!system.is_null()) {  // the system point, when the config sweeps or sets one
        std::string sys;
        for (auto it = system.begin(); it != system.end(); ++it)
            sys += (sys.empty() ? "" : ",") + it.key() + "=" + (it->is_string() ? it->get<std::string>() : it->dump());
        s += "@system(" + sys + ")";
    }
    if (batch > 0)
        s += "@cuda(batch=" + std::to_string(batch) + (kernel.empty() ? "" : ",kernel=" + kernel) +
             (kv.empty() ? "" : ",kv=" + kv) + ")";
    return s;
}

namespace {

int get_int(const json& v, const std::string& where, int lo, int hi) {
    if (!v.is_number_integer()) throw ConfigError(where + " = " + v.dump() + ": expected an integer");
    const long long x = v.get<long long>();
    if (x < lo || x > hi)
        throw ConfigError(where + " = " + v.dump() + ": expected a value in [" + std::to_string(lo) +
                          ", " + std::to_string(hi) + "]");
    return (int)x;
}

std::vector<int> int_list_or_all(const json& v, const std::string& where) {
    if (v.is_string() && v.get<std::string>() == "all") return {};
    if (!v.is_array() || v.empty())
        throw ConfigError(where + " = " + v.dump() + ": expected \"all\" or a non-empty list of integers");
    std::vector<int> out;
    for (size_t i = 0; i < v.size(); ++i)
        out.push_back(get_int(v[i], where + "[" + std::to_string(i) + "]", 0, 1 << 20));
    std::set<int> uniq(out.begin(), out.end());
    if (uniq.size() != out.size()) throw ConfigError(where + " = " + v.dump() + ": duplicate entries");
    return out;
}

// Expands {"k": [1, 2], "gqa": "max"} into [{"k":1,"gqa":"max"}, {"k":2,"gqa":"max"}] (Cartesian
// product over list-valued parameters, in key order; a scalar is a one-point axis).
/// A required key: "missing" when absent, "wrong type" when present with another type (or an empty list).
void require(const json& j, const char* key, json::value_t type, const std::string& expected, const std::string& w) {
    if (!j.contains(key)) throw ConfigError(w + ": missing \"" + key + "\" (" + expected + ")");
    const json& v = j[key];
    const bool ok = type == json::value_t::array ? v.is_array() && !v.empty()
                                                 : v.type() == type;
    if (!ok)
        throw ConfigError(w + ": \"" + key + "\" = " + v.dump() + " has the wrong type" +
                          (v.is_array() && v.empty() ? std::string(" (an empty list)") : " (" + std::string(v.type_name()) + ")") +
                          ": expected " + expected);
}

/// The point's identity for de-duplication: its label with every number as a double, so that 16 and
/// 16.0 (a "number" parameter keeps the value as given) are one point.
std::string normalized_label(MethodRun r) {
    for (auto it = r.params.begin(); it != r.params.end(); ++it)
        if (it->is_number()) *it = it->get<double>();
    for (auto it = r.system.begin(); r.system.is_object() && it != r.system.end(); ++it)
        if (it->is_number()) *it = it->get<double>();
    return r.label();
}

std::vector<json> expand_grid(const json& params) {
    std::vector<json> out = {json::object()};
    for (auto it = params.begin(); it != params.end(); ++it) {
        const json axis = it->is_array() ? *it : json::array({*it});
        std::vector<json> next;
        for (const auto& partial : out)
            for (const auto& v : axis) {
                json p = partial;
                p[it.key()] = v;
                next.push_back(std::move(p));
            }
        out = std::move(next);
    }
    return out;
}
}  // namespace

RunConfig parse_config(const json& j, const std::string& origin) {
    const std::string w = origin.empty() ? "config" : origin;
    if (!j.is_object()) throw ConfigError(w + ": expected a JSON object at top level");
    if (j.contains("experiment"))  // the other experiments have their own runners (apps/retro-bench)
        throw ConfigError(w + ": \"experiment\": " + j["experiment"].dump() +
                          " is not a known experiment (known: \"closed-loop\", \"ood-recall\"; a replay config "
                          "has no \"experiment\" key)");
    check_keys(j, {"name", "description", "traces", "layers", "kv_heads", "steps", "metrics", "hardware",
                   "kv_dtype", "threads", "methods", "figure", "system", "backend", "cuda"},
               w);
    RunConfig c;
    c.source = j;
    require(j, "name", json::value_t::string, "a string: results go to results/<name>/", w);
    c.name = j["name"].get<std::string>();
    if (!std::regex_match(c.name, std::regex("[A-Za-z0-9._-]+")) || c.name == "." || c.name == "..")
        throw ConfigError(w + ": name '" + c.name + "' must match [A-Za-z0-9._-]+");
    // The name is a directory name (NAME_MAX 255 on Linux file systems); 128 leaves room for suffixes.
    constexpr size_t kMaxConfigName = 128;
    if (c.name.size() > kMaxConfigName)
        throw ConfigError(w + ": name '" + c.name.substr(0, 32) + "...' is " + std::to_string(c.name.size()) +
                          " characters, expected at most " + std::to_string(kMaxConfigName) +
                          " (it names the results directory)");
    if (j.contains("description")) {
        if (!j["description"].is_string()) throw ConfigError(w + ": description must be a string");
        c.description = j["description"].get<std::string>();
    }

    require(j, "traces", json::value_t::array, "a non-empty list of paths or {path, synth} objects", w);
    for (size_t i = 0; i < j["traces"].size(); ++i) {
        const json& t = j["traces"][i];
        const std::string tw = w + ": traces[" + std::to_string(i) + "]";
        TraceSpec s;
        if (t.is_string()) {
            s.path = t.get<std::string>();
        } else if (t.is_object()) {
            check_keys(t, {"path", "synth"}, tw);
            require(t, "path", json::value_t::string, "a string", tw);
            s.path = t["path"].get<std::string>();
            if (t.contains("synth")) {
                if (!t["synth"].is_object()) throw ConfigError(tw + ".synth: expected an object");
                s.synth = t["synth"];
            }
        } else {
            throw ConfigError(tw + ": expected a path string or an object {path, synth}");
        }
        if (s.path.empty()) throw ConfigError(tw + ": empty path");
        c.traces.push_back(std::move(s));
    }

    if (j.contains("layers")) c.layers = int_list_or_all(j["layers"], w + ": layers");
    if (j.contains("kv_heads")) c.kv_heads = int_list_or_all(j["kv_heads"], w + ": kv_heads");
    if (j.contains("steps")) {
        const json& s = j["steps"];
        if (s.is_string() && s.get<std::string>() == "all") {
        } else if (s.is_object()) {
            check_keys(s, {"first", "count", "stride"}, w + ": steps");
            if (s.contains("first")) c.steps.first = get_int(s["first"], w + ": steps.first", 0, 1 << 24);
            if (s.contains("count")) c.steps.count = get_int(s["count"], w + ": steps.count", 1, 1 << 24);
            if (s.contains("stride")) c.steps.stride = get_int(s["stride"], w + ": steps.stride", 1, 1 << 24);
        } else {
            throw ConfigError(w + ": steps = " + s.dump() + ": expected \"all\" or {first, count, stride}");
        }
    }
    if (j.contains("metrics")) {
        const json& m = j["metrics"];
        if (!m.is_object()) throw ConfigError(w + ": metrics must be an object");
        check_keys(m, {"recall_k"}, w + ": metrics");
        if (m.contains("recall_k")) {
            c.recall_k = int_list_or_all(m["recall_k"], w + ": metrics.recall_k");
            if (c.recall_k.empty()) throw ConfigError(w + ": metrics.recall_k: expected a list of integers");
            for (int k : c.recall_k)
                if (k < 1) throw ConfigError(w + ": metrics.recall_k: values must be >= 1");
        }
    }
    if (j.contains("hardware")) {
        if (!j["hardware"].is_string()) throw ConfigError(w + ": hardware must be a profile name string");
        c.hardware = j["hardware"].get<std::string>();
    }
    if (j.contains("kv_dtype")) {
        const json& v = j["kv_dtype"];
        static const std::set<std::string> ok = {"trace", "float16", "bfloat16", "float32"};
        if (!v.is_string() || !ok.count(v.get<std::string>()))
            throw ConfigError(w + ": kv_dtype = " + v.dump() + ": expected trace|float16|bfloat16|float32");
        c.kv_dtype = v.get<std::string>();
    }
    if (j.contains("threads")) c.threads = get_int(j["threads"], w + ": threads", 0, 4096);
    if (j.contains("backend")) c.backend = parse_backend(j["backend"], w);
    if (j.contains("cuda")) {
        if (c.backend != "cuda")
            throw ConfigError(w + ": a \"cuda\" section needs \"backend\": \"cuda\" (backend is \"" + c.backend + "\")");
        c.cuda = CudaOptions::from_json(j["cuda"], w + ": cuda");
    }
    // "measured": the cost model calibrated by the device the run is on (bench/measured_hardware.hpp),
    // the default of the cuda backend; the CPU backend has no device to measure
    if (c.backend == "cuda" && !j.contains("hardware")) c.hardware = "measured";
    if (c.backend != "cuda" && c.hardware == "measured")
        throw ConfigError(w + ": hardware \"measured\" calibrates the cost model by the GPU a run is on: it needs "
                              "\"backend\": \"cuda\" (name a profile of configs/hardware/ for the CPU backend)");
    if (c.backend == "cuda" && c.kv_dtype != "trace" && c.kv_dtype != "float16")
        throw ConfigError(w + ": backend 'cuda' stores the KV as float16: kv_dtype = \"" + c.kv_dtype +
                          "\" (expected \"trace\" or \"float16\")");
    // backend "cuda": the batch is one more sweep axis (0 = the CPU backend, no axis)
    const std::vector<int> batches = c.backend == "cuda" ? c.cuda.batch : std::vector<int>{0};

    // "system": GPU cache / cost-model settings; list values are sweep axes (lib/system).
    std::vector<json> system_points = {json()};
    if (j.contains("system")) {
        const json& sj = j["system"];
        const std::string sw = w + ": system";
        if (!sj.is_object()) throw ConfigError(sw + ": expected an object");
        c.system = sj;
        json axes = json::object();
        for (auto it = sj.begin(); it != sj.end(); ++it) {
            if (it.key() == "throughput") continue;
            if (it->is_array() && it->empty()) throw ConfigError(sw + "." + it.key() + ": empty list of values");
            axes[it.key()] = *it;
        }
        system_points.clear();
        for (const json& point : expand_grid(axes))
            system_points.push_back(SystemParams::from_json(point, sw).to_json());
        if (sj.contains("throughput"))
        {
            const ThroughputParams tp = ThroughputParams::from_json(sj["throughput"], sw + ".throughput");
            try {
                find_model_shape(tp.model);
            } catch (const ConfigError& e) {
                throw ConfigError(sw + ".throughput.model: " + e.what());
            }
            c.throughput = tp.to_json();
        }
    }

    require(j, "methods", json::value_t::array, "a non-empty list of {name, params}", w);
    std::set<std::string> seen;
    for (size_t i = 0; i < j["methods"].size(); ++i) {
        const json& m = j["methods"][i];
        const std::string mw = w + ": methods[" + std::to_string(i) + "]";
        if (!m.is_object()) throw ConfigError(mw + ": expected an object {name, params}");
        check_keys(m, {"name", "params"}, mw);
        require(m, "name", json::value_t::string, "a method name string", mw);
        const MethodInfo* info = nullptr;
        try {
            info = &find_method(m["name"].get<std::string>());
        } catch (const ConfigError& e) {
            throw ConfigError(mw + ": " + e.what());
        }
        const json params = m.contains("params") ? m["params"] : json::object();
        if (!params.is_object()) throw ConfigError(mw + ".params: expected an object");
        for (auto it = params.begin(); it != params.end(); ++it)
            if (it->is_array() && it->empty())
                throw ConfigError(mw + ".params." + it.key() + ": empty list of values");
        // backend "cuda": full's kernel and wave's KV placement are more axes of their points (the GPU
        // twin says which it has: gpu/gpu_methods.hpp)
        const GpuMethodInfo* twin = c.backend == "cuda" ? find_gpu_method(info->name) : nullptr;
        const std::vector<std::string> kernels =
            twin && twin->kernel_axis ? c.cuda.full_kernel : std::vector<std::string>{""};
        std::vector<std::string> kvs = {""};
        if (twin && twin->kv_axis) {
            kvs.clear();
            for (const std::string& k : c.cuda.wave_kv) kvs.push_back(k == "host" ? "" : k);
        }
        for (const json& point : expand_grid(params))
            for (const json& sys : system_points)
                for (const int batch : batches)
                for (const std::string& kernel : kernels)
                for (const std::string& kv : kvs) {
                    MethodRun r;
                    r.method = info->name;
                    r.system = sys;
                    r.batch = batch;
                    r.kernel = kernel;
                    r.kv = kv;
                    try {
                        r.params = resolve_params(*info, point);
                    } catch (const ConfigError& e) {
                        throw ConfigError(mw + ": " + e.what());
                    }
                    if (batch > 0) check_cuda_run(r, c.cuda, mw);
                    if (!seen.insert(normalized_label(r)).second) continue;  // a point listed twice runs once
                    c.runs.push_back(std::move(r));
                }
    }
    return c;
}

RunConfig load_config(const std::string& path) {
    return parse_config(read_json_file(path, "config file"), path);  // strict: duplicate keys, 1e400
}

json RunConfig::resolved() const {
    json j;
    j["name"] = name;
    j["description"] = description;
    j["traces"] = json::array();
    for (const auto& t : traces) {
        json tj = {{"path", t.path}};
        if (!t.synth.is_null()) tj["synth"] = t.synth;
        j["traces"].push_back(tj);
    }
    j["layers"] = layers.empty() ? json("all") : json(layers);
    j["kv_heads"] = kv_heads.empty() ? json("all") : json(kv_heads);
    j["steps"] = {{"first", steps.first}, {"count", steps.count}, {"stride", steps.stride}};
    j["metrics"] = {{"recall_k", recall_k}};
    j["hardware"] = hardware;
    j["kv_dtype"] = kv_dtype;
    j["threads"] = threads;
    j["backend"] = backend;
    if (backend == "cuda") j["cuda"] = cuda.to_json();
    j["runs"] = json::array();
    if (!system.is_null()) j["system"] = system;
    if (!throughput.is_null()) j["throughput"] = throughput;
    for (const auto& r : runs) {
        json rj = {{"method", r.method}, {"params", r.params}};
        if (!r.system.is_null()) rj["system"] = r.system;
        if (r.batch > 0) rj["batch"] = r.batch;
        if (!r.kernel.empty()) rj["kernel"] = r.kernel;
        if (!r.kv.empty()) rj["kv"] = r.kv;
        j["runs"].push_back(rj);
    }
    return j;
}

}  // namespace retro
