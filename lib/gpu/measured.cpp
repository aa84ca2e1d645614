#include "gpu/measured.hpp"

#include "core/error.hpp"

namespace retro {

std::string base_profile_for(const std::string& device) {
    const auto has = [&](const char* s) { return device.find(s) != std::string::npos; };
    if (has("H200")) return "h200";
    if (has("H100")) return "h100-sxm-pcie5";
    if (has("A100")) return "a100-80gb-pcie4";
    if (has("A6000")) return "a6000";
    if (has("4090")) return "rtx4090";
    return "h100-sxm-pcie5";
}

const std::vector<std::string>& measured_fields() {
    static const std::vector<std::string> f = {"hbm_GBps",      "hbm_efficiency",  "pcie_h2d_GBps", "pcie_d2h_GBps",
                                               "pcie_efficiency", "pcie_latency_us", "gpu_memory_GiB"};
    return f;
}

HardwareSpec measured_spec(HardwareSpec base, const MeasuredDevice& m) {
    const auto positive = [&](double x, const char* what) {
        if (!(x > 0))
            throw ParamError("hardware \"measured\" on " + m.device + ": " + what + " = " + std::to_string(x) +
                             " (expected a positive measurement)");
        return x;
    };
    base.name = "measured:" + m.device;
    base.hbm_GBps = positive(m.hbm_bytes_per_s, "device-to-device copy bytes/s") / 1e9;
    base.hbm_efficiency = 1.0;
    base.pcie_h2d_GBps = positive(m.h2d_bytes_per_s, "pinned host-to-device bytes/s") / 1e9;
    base.pcie_d2h_GBps = positive(m.d2h_bytes_per_s, "device-to-pinned-host bytes/s") / 1e9;
    base.pcie_efficiency = 1.0;
    base.pcie_latency_us = positive(m.transfer_latency_us, "transfer latency (us)");
    base.gpu_memory_GiB = positive(m.memory_bytes, "device memory bytes") / (double)(1ull << 30);
    if (base.gpu_memory_reserved_GiB >= base.gpu_memory_GiB) base.gpu_memory_reserved_GiB = 0.5 * base.gpu_memory_GiB;
    return base;
}

}  // namespace retro
