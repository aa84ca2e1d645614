#pragma once
// Cost model (docs/system-model.md): per-layer decode-step time from bytes and work on a hardware
// profile, with each method's overlap, and decode throughput vs batch size under the GPU-memory limit.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "system/hardware.hpp"

namespace retro {

/// How a method's phases overlap within one layer step.
enum class Overlap {
    serial,  ///< select (GPU) -> d2h -> CPU lookup -> h2d -> attention, one after the other
    wave,    ///< RetroInfer: GPU estimation/ranking || (d2h ids + CPU mapping-table lookup); then the
             ///< miss copy (h2d) before attention; cache update off the critical path
    stream,  ///< offloaded full attention: layer-wise prefetch, h2d overlapped with attention
};
Overlap overlap_for_method(const std::string& method, const nlohmann::json& params);
const char* overlap_name(Overlap o);

/// One decode step of one layer for ONE sequence, summed over its KV heads.
struct LayerWork {
    double gpu_read_bytes = 0;   ///< HBM bytes read: exact attention's KV + index data (centroids...)
    double gpu_flops = 0;        ///< FLOPs on the GPU for attention and selection
    double h2d_bytes = 0;        ///< host->device, after the GPU cache
    double d2h_bytes = 0;        ///< device->host (cluster ids, queries)
    double cpu_us = 0;           ///< CPU work on the critical path, single-core microseconds
    double resident_bytes = 0;   ///< GPU-resident bytes (KV kept, index, cache)
    Overlap overlap = Overlap::serial;
};

/// Modeled time of one layer step for `batch` sequences with identical work.
struct LayerTime {
    double weights_us = 0;  ///< non-attention layer work (projections, FFN): weights from HBM
    double select_us = 0;   ///< GPU selection/estimation (index reads)
    double cpu_us = 0;      ///< CPU lookup spread over the cores
    double d2h_us = 0, h2d_us = 0;
    double attend_us = 0;   ///< exact attention on the GPU
    double attention_us = 0;  ///< everything but weights, after overlap
    double total_us = 0;
    std::string bound;      ///< the largest critical-path term: weights|hbm|pcie|cpu
};

/// `select_fraction`: the part of gpu_read_bytes that is selection (index) rather than attention.
LayerTime layer_time(const LayerWork& w, double select_bytes, int batch, const HardwareProfile& hw,
                     double weight_bytes_per_layer);

/// A model's shape for the throughput table. Sources are in cost_model.cpp.
struct ModelShape {
    std::string name;
    int layers = 32, q_heads = 32, kv_heads = 8, head_dim = 128;
    double weight_bytes = 16.06e9;  ///< all weights, 16-bit
    std::string source;
};
const ModelShape& find_model_shape(const std::string& name);  ///< ConfigError when unknown
const std::vector<ModelShape>& model_shapes();

/// A method's per-KV-head, per-step work normalized per visible token (bytes per token are in units
/// of the KV bytes of one token, so they transfer to another head_dim/dtype).
struct PerTokenWork {
    double attend_kv = 0;   ///< KV-token equivalents read by exact attention, / n
    double index_kv = 0;    ///< index data read on the GPU, KV-token equivalents, / n
    double h2d_kv = 0;      ///< post-cache h2d, KV-token equivalents, / n
    double d2h_bytes = 0;   ///< bytes / n
    double lookup_units = 0;  ///< CPU lookups, / n
    double resident_kv = 0;   ///< GPU-resident KV-token equivalents, / n
};

/// Throughput of `method` for `shape` at context `context` and each batch size on `hw`: rows with
/// tokens/s (null when the batch does not fit in GPU memory), the per-layer time and its bound.
nlohmann::json throughput_table(const PerTokenWork& w, Overlap overlap, double lookup_ns, int group,
                                const ModelShape& shape, double elem_bytes, const std::vector<int>& contexts,
                                const std::vector<int>& batches, const HardwareProfile& hw);

}  // namespace retro
