// The layer run of each GPU method (layer_runs.hpp).
#include "run/layer_runs.hpp"

#include <map>

namespace retro::gpu_run {

LayerRun find_layer_run(const std::string& method) {
    static const std::map<std::string, LayerRun> runs = {
        {"full", run_full_layer}, {"wave", run_wave_layer}, {"quest", run_quest_layer}, {"pq", run_pq_layer}, {"magicpig", run_magicpig_layer},
        {"faiss_flat", run_host_index_layer}, {"faiss_ivf", run_host_index_layer}, {"faiss_hnsw", run_host_index_layer},
        {"retrieval_attention", run_host_index_layer}};
    const auto it = runs.find(method);
    return it == runs.end() ? nullptr : it->second;
}

IndexBuild find_index_build(const std::string& method) {
    static const std::map<std::string, IndexBuild> builds = {
        {"wave", build_wave_heads}, {"pq", build_pq_heads}, {"faiss_flat", build_host_index_heads},
        {"faiss_ivf", build_host_index_heads}, {"faiss_hnsw", build_host_index_heads},
        {"retrieval_attention", build_host_index_heads}};
    const auto it = builds.find(method);
    return it == builds.end() ? nullptr : it->second;
}

}  // namespace retro::gpu_run
