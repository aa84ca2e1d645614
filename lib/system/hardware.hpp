#pragma once
// Hardware profiles (configs/hardware/<name>.json): the numbers the cost model (system/cost_model.hpp)
// turns bytes and work into time with. Every field in the file is {"value": x, "source": "..."}.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace retro {

struct HardwareProfile {
    std::string name;
    std::string description;
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
    nlohmann::json sources;           ///< field -> source text, as in the file

    /// Effective bandwidths in bytes per microsecond.
    double h2d_B_per_us() const { return pcie_h2d_GBps * pcie_efficiency * 1e3; }
    double d2h_B_per_us() const { return pcie_d2h_GBps * pcie_efficiency * 1e3; }
    double hbm_B_per_us() const { return hbm_GBps * hbm_efficiency * 1e3; }

    /// Parses a profile; every numeric field is required as {"value", "source"} with a non-empty
    /// source and a positive value. `origin` prefixes error messages (ConfigError).
    static HardwareProfile from_json(const nlohmann::json& j, const std::string& origin);
    nlohmann::json to_json() const;  ///< name, description and every value (sources included)
};

/// Directories searched for <name>.json: $RETRO_HARDWARE_DIR, ./configs/hardware, and the source
/// tree's configs/hardware.
std::vector<std::string> hardware_search_dirs();

/// Loads the profile `name` (a file name without .json, or a path to a .json file). Throws
/// ConfigError naming the profile and the directories searched when it is absent.
HardwareProfile load_hardware_profile(const std::string& name);

/// Profile names found in the search directories, sorted, unique.
std::vector<std::string> list_hardware_profiles();

}  // namespace retro
