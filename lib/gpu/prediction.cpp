#include "gpu/prediction.hpp"

namespace retro {

LayerWork gpu_layer_work(const GpuStepWork& w, Overlap overlap, int group, double lookup_ns) {
    LayerWork lw;
    lw.overlap = overlap;
    lw.gpu_read_bytes = w.attend_bytes + w.index_bytes;
    lw.gpu_flops = (double)group * lw.gpu_read_bytes;
    lw.h2d_bytes = w.h2d_bytes;
    lw.d2h_bytes = w.d2h_bytes;
    lw.cpu_us = w.lookups * lookup_ns * 1e-3;
    return lw;
}

LayerTime predict_gpu_step(const GpuStepWork& w, Overlap overlap, int group, double lookup_ns, int batch,
                           const HardwareSpec& hw) {
    return layer_time(gpu_layer_work(w, overlap, group, lookup_ns), w.index_bytes, batch, hw, 0.0);
}

Overlap gpu_overlap(GpuMethod m, bool offloaded) {
    if (m == GpuMethod::wave) return Overlap::wave;
    return offloaded ? Overlap::stream : Overlap::serial;
}

}  // namespace retro
