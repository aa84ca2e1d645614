#include "system/layer_time.hpp"

#include <algorithm>

namespace retro {

const char* overlap_name(Overlap o) {
    switch (o) {
        case Overlap::wave: return "wave";
        case Overlap::stream: return "stream";
        default: return "serial";
    }
}

LayerTime layer_time(const LayerWork& w, double select_bytes, int batch, const HardwareSpec& hw,
                     double weight_bytes_per_layer) {
    LayerTime t;
    const double B = batch;
    const double hbm = hw.hbm_B_per_us();
    const double flops_per_us = hw.gpu_tflops * 1e6;
    // Non-attention work: the layer's weights are read once per step for the whole batch; the matmuls
    // are 2 FLOPs per weight per sequence (16-bit weights: weight_bytes / 2 parameters).
    t.weights_us = weight_bytes_per_layer > 0
                       ? std::max(weight_bytes_per_layer / hbm, B * weight_bytes_per_layer / flops_per_us)
                       : 0.0;
    const double attn_bytes = std::max(0.0, w.gpu_read_bytes - select_bytes);
    t.select_us = B * select_bytes / hbm;
    t.attend_us = std::max(B * attn_bytes / hbm, B * w.gpu_flops / flops_per_us);
    t.cpu_us = w.cpu_us > 0 ? B * w.cpu_us / hw.cpu_cores : 0.0;
    // Copies: one batched transfer per direction per layer (a gather kernel), bounded by the slower of
    // PCIe and CPU DRAM.
    const double h2d_bw = std::min(hw.h2d_B_per_us(), hw.dram_GBps * 1e3);
    t.h2d_us = w.h2d_bytes > 0 ? hw.pcie_latency_us + B * w.h2d_bytes / h2d_bw : 0.0;
    t.d2h_us = w.d2h_bytes > 0 ? hw.pcie_latency_us + B * w.d2h_bytes / hw.d2h_B_per_us() : 0.0;
    std::string bound = "hbm";
    switch (w.overlap) {
        case Overlap::wave: {
            const double side = t.d2h_us + t.cpu_us;
            t.attention_us = std::max(t.select_us, side) + t.h2d_us + t.attend_us;
            const double gpu = t.select_us + t.attend_us;
            if (side > t.select_us && side + t.h2d_us > gpu) bound = t.h2d_us > side ? "pcie" : "cpu";
            else if (t.h2d_us > gpu) bound = "pcie";
            break;
        }
        case Overlap::stream:
            t.attention_us = t.select_us + t.d2h_us + t.cpu_us + std::max(t.h2d_us, t.attend_us);
            if (t.h2d_us > t.attend_us) bound = "pcie";
            break;
        default:
            t.attention_us = t.select_us + t.d2h_us + t.cpu_us + t.h2d_us + t.attend_us;
            if (t.h2d_us + t.d2h_us > t.select_us + t.attend_us) bound = "pcie";
            if (t.cpu_us > std::max(t.h2d_us + t.d2h_us, t.select_us + t.attend_us)) bound = "cpu";
    }
    t.total_us = t.weights_us + t.attention_us;
    if (t.weights_us > t.attention_us) bound = "weights";
    t.bound = bound;
    return t;
}

}  // namespace retro
