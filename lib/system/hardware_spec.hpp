#pragma once
// The numbers of a hardware profile that the cost model (system/layer_time.hpp) turns bytes and work
// into time with. JSON-free, so the RETRO_GPU_ONLY driver can use them; system/hardware.hpp adds the
// profile file format (configs/hardware/<name>.json, every field {"value", "source"}), loading and listing.
#include <string>
#include <vector>

namespace retro {

struct HardwareSpec {
    std::string name;
    double pcie_h2d_GBps = 32;        ///< host->device peak, GB/s (1e9 B/s)
    double pcie_d2h_GBps = 32;        ///< device->host peak, GB/s
    double pcie_efficiency = 0.8;     ///< achieved fraction of the PCIe peak
    double pcie_latency_us = 10;      ///< fixed cost of one transfer (launch + link latency)
    double hbm_GBps = 1935;           ///< GPU memory bandwidth peak, GB/s
    double hbm_efficiency = 0.8;      ///< achieved fraction of the HBM peak by decode kernels
    double gpu_tflops = 312;          ///< dense FP16 tensor TFLOP/s
    double gpu_memory_GiB = 80;       ///< GPU memory, GiB (2^30 B)
    double gpu_memory_reserved_GiB = 1;  ///< GiB not available to weights and KV (context, slack)
    double cpu_cores = 48;
    double dram_GBps = 204.8;         ///< CPU memory bandwidth, GB/s
    double cpu_gflops = 3763;         ///< CPU peak FP32 GFLOP/s (all cores)

    /// Effective bandwidths in bytes per microsecond.
    double h2d_B_per_us() const { return pcie_h2d_GBps * pcie_efficiency * 1e3; }
    double d2h_B_per_us() const { return pcie_d2h_GBps * pcie_efficiency * 1e3; }
    double hbm_B_per_us() const { return hbm_GBps * hbm_efficiency * 1e3; }
};

/// The numeric fields of a profile, in file order ("pcie_h2d_GBps", ..., "cpu_gflops").
const std::vector<std::string>& hardware_fields();
/// The field `key` of h; nullptr when `key` is not one of hardware_fields().
double* hardware_field(HardwareSpec& h, const std::string& key);
double hardware_field(const HardwareSpec& h, const std::string& key);  ///< NaN when unknown

}  // namespace retro
