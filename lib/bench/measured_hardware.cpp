#include "bench/measured_hardware.hpp"

#include <cstdio>

#include "core/host.hpp"

namespace retro {

HardwareProfile measured_profile(const MeasuredDevice& m) {
    const HardwareProfile base = load_hardware_profile(base_profile_for(m.device));
    HardwareProfile p = base;
    static_cast<HardwareSpec&>(p) = measured_spec(base, m);
    p.description = "Measured on " + m.device + " at " + utc_now_iso() + " by retro-bench at the start of the run; "
                    "the fields not measured are the " + base.name + " profile's.";
    char buf[160];
    const std::string when = " (retro-bench measure_ceilings on " + m.device + ", " + utc_now_iso() + ")";
    std::snprintf(buf, sizeof buf, "measured: device-to-device copy, %.0f GB/s read+write", m.hbm_bytes_per_s / 1e9);
    p.sources["hbm_GBps"] = buf + when;
    p.sources["hbm_efficiency"] = "1: hbm_GBps is an achieved rate, not a peak" + when;
    std::snprintf(buf, sizeof buf, "measured: pinned host-to-device copy, %.1f GB/s", m.h2d_bytes_per_s / 1e9);
    p.sources["pcie_h2d_GBps"] = buf + when;
    std::snprintf(buf, sizeof buf, "measured: device-to-pinned-host copy, %.1f GB/s", m.d2h_bytes_per_s / 1e9);
    p.sources["pcie_d2h_GBps"] = buf + when;
    p.sources["pcie_efficiency"] = "1: the PCIe rates are achieved rates, not peaks" + when;
    std::snprintf(buf, sizeof buf, "measured: a 4-byte pinned H2D copy, issue to completion, median %.1f us",
                  m.transfer_latency_us);
    p.sources["pcie_latency_us"] = buf + when;
    p.sources["gpu_memory_GiB"] = "measured: cudaMemGetInfo total" + when;
    return p;
}

}  // namespace retro
