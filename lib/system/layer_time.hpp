#pragma once
// The cost model's per-layer step time (docs/system-model.md §5): bytes and work of one decode step of
// one layer -> modeled time on a hardware profile, with each method's overlap. JSON-free, so the
// RETRO_GPU_ONLY driver predicts with the same function as the run records (system/cost_model.hpp adds
// model shapes and throughput vs batch).
#include <string>

#include "system/hardware_spec.hpp"

namespace retro {

/// How a method's phases overlap within one layer step.
enum class Overlap {
    serial,  ///< select (GPU) -> d2h -> CPU lookup -> h2d -> attention, one after the other
    wave,    ///< RetroInfer: GPU estimation/ranking || (d2h ids + CPU mapping-table lookup); then the
             ///< miss copy (h2d) before attention; cache update off the critical path
    stream,  ///< offloaded full attention: layer-wise prefetch, h2d overlapped with attention
};
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

/// `select_bytes`: the part of gpu_read_bytes that is selection (index) rather than attention.
LayerTime layer_time(const LayerWork& w, double select_bytes, int batch, const HardwareSpec& hw,
                     double weight_bytes_per_layer);

}  // namespace retro
