// A run's resolved parameters as a GPU layer job (gpu_job_params.hpp).
#include "bench/gpu_job_params.hpp"

#include <functional>
#include <map>

#include "gpu/gpu_methods.hpp"
#include "bench/head_run.hpp"
#include "methods/magicpig.hpp"
#include "methods/params.hpp"
#include "methods/pq.hpp"
#include "methods/wave.hpp"
#include "system/head_system.hpp"

namespace retro {

namespace {

using Binding = std::function<void(const nlohmann::json& params, GpuLayerJob& job)>;

/// The CPU-index methods' binding: the CPU method itself (made by its registry entry with the run's
/// parameters), its static pattern and its seeds.
Binding host_index_binding(const std::string& method) {
    return [method](const nlohmann::json& p, GpuLayerJob& job) {
        job.host_index.make = [method, p] { return find_method(method).make(p); };
        job.host_index.sink = p.at("sink").get<int>();
        job.host_index.window = p.at("window").get<int>();
        job.host_index.window_slides = p.value("decode_tokens", "static") == "index";
        job.host_index.seed = [method, p](int layer, int kv_head) { return method_seed(method, p, layer, kv_head); };
    };
}

/// The binding of each GPU method's parameters: one entry per method of gpu_method_registry().
const std::map<std::string, Binding>& bindings() {
    static const std::map<std::string, Binding> b = {
        {"full", [](const nlohmann::json& p, GpuLayerJob& job) { job.offloaded = p.value("offloaded", false); }},
        {"wave", [](const nlohmann::json& p, GpuLayerJob& job) { job.wave = wave_params_from_json(p); }},
        {"quest",
         [](const nlohmann::json& p, GpuLayerJob& job) {
             job.quest.k = p.at("k").get<double>();
             job.quest.page_size = p.at("page_size").get<int>();
             job.quest.per_head = p.at("gqa").get<std::string>() != "max";
             job.quest.dense_layers = p.at("dense_layers").get<int>();
         }},
        {"pq",
         [](const nlohmann::json& p, GpuLayerJob& job) {
             job.pq.head = pq_params_from_json(p);
             job.pq.seed = [p](int layer, int kv_head) { return method_seed("pq", p, layer, kv_head); };
         }},
        {"magicpig",
         [](const nlohmann::json& p, GpuLayerJob& job) {
             job.magicpig.head = magicpig_params_from_json(p);
             job.magicpig.seed = [p](int layer, int kv_head) { return method_seed("magicpig", p, layer, kv_head); };
         }},
        {"faiss_flat", host_index_binding("faiss_flat")},
        {"faiss_ivf", host_index_binding("faiss_ivf")},
        {"faiss_hnsw", host_index_binding("faiss_hnsw")},
        {"retrieval_attention", host_index_binding("retrieval_attention")},
    };
    return b;
}

FullKernel full_kernel_of(const std::string& kernel) {
    return kernel == "own" ? FullKernel::own : kernel == "cudnn" ? FullKernel::cudnn : FullKernel::library;
}

}  // namespace

GpuLayerJob gpu_job_for(const MethodRun& r, const CudaOptions& o, const std::string& where) {
    const std::string w = where + ": backend 'cuda'";
    const GpuMethodInfo* m = find_gpu_method(r.method);
    const auto b = bindings().find(r.method);
    if (!m || b == bindings().end())
        throw ConfigError(w + " runs the methods with a GPU twin only (" + gpu_method_names() + "), not '" +
                          r.method + "'");
    GpuLayerJob job;
    job.method = m->name;
    job.kmeans_on_gpu = o.kmeans == "gpu";
    job.warmup = o.warmup;
    job.launch_gate = o.launch_gate;
    job.step_graph = o.step_graph;
    job.full_kernel = full_kernel_of(r.kernel);
    job.batch = r.batch > 0 ? r.batch : 1;
    job.kv_on_gpu = r.kv == "gpu";
    job.wave_device_gather = o.device_gather;
    job.async_update = o.async_update;
    job.host_threads = o.host_threads;
    for (const auto& [name, value] : m->required_params) {
        const auto it = r.params.find(name);
        const std::string got = it != r.params.end() && it->is_string() ? it->get<std::string>() : "";
        if (got != value)
            throw ConfigError(w + ": " + r.method + " parameter '" + name + "' = \"" + got + "\": the GPU path takes \"" +
                              value + "\" only (" + m->summary + "); set \"" + name + "\": \"" + value + "\"");
    }
    try {
        b->second(r.params, job);
        check_gpu_job(*m, job);
    } catch (const ParamError& e) {
        throw ConfigError(w + ": " + e.what());
    }
    return job;
}

void set_job_cache(const MethodRun& r, int head_dim, int prompt_len, GpuLayerJob& job, const std::string& where) {
    const SystemParams sp = r.system.is_null() ? SystemParams{} : SystemParams::from_json(r.system, "system");
    job.cache = head_cache_params(sp, head_dim, 2.0, prompt_len, job.block_tokens);  // fp16 KV on the GPU
    job.unit_tokens = sp.token_block;
    try {
        find_gpu_method(job.method)->check(job);
    } catch (const ParamError& e) {
        throw ConfigError(where + ": backend 'cuda': " + e.what());
    }
}

}  // namespace retro
