#pragma once
// The system model of one (run, layer, KV head): collects each selected step's transfer units and
// work, replays the GPU block cache over the whole sequence (offline, so Belady works too) and turns
// the result into per-step metrics. Used by the runner (lib/bench/runner.cpp).
#include <map>
#include <string>
#include <vector>

#include "methods/method.hpp"
#include "system/block_cache.hpp"
#include "system/cost_model.hpp"
#include "system/hardware.hpp"
#include "system/system_params.hpp"

namespace retro {

struct HeadSystemContext {
    std::string method;
    nlohmann::json params;
    int head_dim = 128;
    int group = 1;
    double elem_bytes = 2;  ///< bytes per element of the stored KV
    int prompt_len = 0;
    int num_kv_heads = 1;   ///< KV heads of the layer (model_us assumes each behaves like this one)
};

/// The GPU block cache of one KV head under `sp` (what HeadSystem replays and the GPU runs): its capacity
/// (sp.cache of the prompt's KV, or sp.cache_bytes) in token slots of whole blocks, the policy and the
/// per-step admission cap; block_tokens receives the block's tokens (block_bytes of keys per block).
CacheParams head_cache_params(const SystemParams& sp, int head_dim, double elem_bytes, int prompt_len, int& block_tokens);

class HeadSystem {
  public:
    HeadSystem(const SystemParams& sp, const HardwareProfile& hw, const HeadSystemContext& c);

    /// Records one selected step (after Method::select): `n_visible` tokens, the method's footprint.
    void record(const Selection& sel, int n_visible, const Footprint& fp);

    /// Replays the cache and appends one sample per recorded step to `kv`: h2d_bytes (post-cache),
    /// fetch_bytes (no cache), gpu_bytes (footprint + cache when the method fetches through it),
    /// gpu_read_bytes, fetch_units, model_us; cache_hit only for steps that needed units.
    void finish(std::map<std::string, std::vector<double>>& kv) const;

    int block_tokens() const { return block_tokens_; }
    const CacheParams& cache_params() const { return cache_; }  ///< the GPU block cache of this head
    int64_t capacity_slots() const { return cache_.capacity_slots; }

  private:
    struct StepRec {
        double h2d = 0, d2h = 0, needed_tokens = 0, gpu_bytes = 0, exact_tokens = 0, index_bytes = 0;
        int n = 0;
    };
    SystemParams sp_;
    HardwareProfile hw_;
    HeadSystemContext c_;
    Overlap overlap_;
    int block_tokens_ = 8;
    CacheParams cache_;
    bool uses_cache_ = false;
    std::vector<StepRec> steps_;
    std::vector<std::vector<UnitRequest>> reqs_;
};

}  // namespace retro

namespace retro {

/// The decode-throughput table of one run record (system.throughput): the run's per-KV-head means
/// (`metrics`: the record's aggregates of gpu_read_bytes, h2d_bytes, d2h_bytes, gpu_bytes,
/// fetch_units, and est/exact fractions) normalized per visible token (`mean_visible`), scaled to each
/// context length of `throughput` (default: mean_visible) for its model shape, on `hw`.
nlohmann::json record_throughput(const nlohmann::json& metrics, double mean_visible, int head_dim, int group,
                                 double elem_bytes, const std::string& method, const nlohmann::json& params,
                                 const nlohmann::json& system_point, const nlohmann::json& throughput,
                                 const HardwareProfile& hw);

}  // namespace retro
