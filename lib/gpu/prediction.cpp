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

PhaseFit PhaseFit::fit(const std::vector<std::pair<double, double>>& points) {
    PhaseFit f;
    const double n = (double)points.size();
    if (points.size() < 2) return f;
    double sx = 0, sy = 0;
    for (const auto& [x, y] : points) sx += x, sy += y;
    const double mx = sx / n, my = sy / n;
    double sxx = 0, sxy = 0;
    for (const auto& [x, y] : points) sxx += (x - mx) * (x - mx), sxy += (x - mx) * (y - my);
    if (!(sxx > 0) || !(sxy > 0)) return f;  // one byte count, or time not growing with the bytes
    double slope = sxy / sxx, latency = my - slope * mx;
    if (latency < 0) {  // through the origin: us = bytes * slope
        double xx = 0, xy = 0;
        for (const auto& [x, y] : points) xx += x * x, xy += x * y;
        slope = xy / xx, latency = 0;
    }
    f.latency_us = latency, f.bytes_per_us = 1.0 / slope;
    return f;
}

}  // namespace retro
