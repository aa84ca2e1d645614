#pragma once
// "hardware": "measured" (docs/system-model.md, docs/cuda.md): the cost model calibrated by the machine a
// cuda run runs on. The device's ceilings, measured at the start of the run (kernels/common/ceilings.cpp
// measure_ceilings: a 1 GiB-class D2D copy, pinned H2D and D2H copies, a 4-byte transfer's latency),
// replace the matching fields of the profile the device's name suggests; the rest (tensor FLOP/s, CPU)
// stay the profile's. JSON-free: the RETRO_GPU_ONLY driver uses it too.
#include <string>
#include <vector>

#include "system/hardware_spec.hpp"

namespace retro {

/// What a backend measured on its device.
struct MeasuredDevice {
    std::string device;              ///< the device's name ("NVIDIA H100 80GB HBM3")
    double hbm_bytes_per_s = 0;      ///< device-to-device copy, (read + write) bytes / time
    double h2d_bytes_per_s = 0;      ///< pinned host -> device copy
    double d2h_bytes_per_s = 0;      ///< device -> pinned host copy
    double transfer_latency_us = 0;  ///< one small transfer, issue to completion
    double memory_bytes = 0;         ///< device memory
};

/// The configs/hardware profile whose unmeasured fields a device's name suggests: H200 -> h200, H100 ->
/// h100-sxm-pcie5, A100 -> a100-80gb-pcie4, A6000 -> a6000, 4090 -> rtx4090, otherwise h100-sxm-pcie5.
std::string base_profile_for(const std::string& device);

/// The fields measured_spec sets: hbm_GBps, hbm_efficiency, pcie_h2d_GBps, pcie_d2h_GBps,
/// pcie_efficiency, pcie_latency_us, gpu_memory_GiB.
const std::vector<std::string>& measured_fields();

/// `base` with the measured ceilings: hbm_GBps = the D2D copy rate and pcie_*_GBps = the copies' rates,
/// each with efficiency 1 (a measured rate is what was achieved, not a peak), pcie_latency_us = the
/// transfer latency, gpu_memory_GiB = the device memory; name "measured:<device>". Throws ParamError
/// naming the field when a measurement is not positive.
HardwareSpec measured_spec(HardwareSpec base, const MeasuredDevice& m);

}  // namespace retro
