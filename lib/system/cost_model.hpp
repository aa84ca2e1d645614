#pragma once
// Cost model (docs/system-model.md): per-layer decode-step time from bytes and work on a hardware
// profile, with each method's overlap, and decode throughput vs batch size under the GPU-memory limit.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "system/hardware.hpp"
#include "system/layer_time.hpp"

namespace retro {

/// The overlap of `method` with these parameters (wave; stream for offloaded full; serial otherwise).
Overlap overlap_for_method(const std::string& method, const nlohmann::json& params);

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
