#include "system/hardware_spec.hpp"

#include <limits>

namespace retro {

namespace {
struct Field {
    const char* key;
    double HardwareSpec::*member;
};
const Field kFields[] = {
    {"pcie_h2d_GBps", &HardwareSpec::pcie_h2d_GBps},
    {"pcie_d2h_GBps", &HardwareSpec::pcie_d2h_GBps},
    {"pcie_efficiency", &HardwareSpec::pcie_efficiency},
    {"pcie_latency_us", &HardwareSpec::pcie_latency_us},
    {"hbm_GBps", &HardwareSpec::hbm_GBps},
    {"hbm_efficiency", &HardwareSpec::hbm_efficiency},
    {"gpu_tflops", &HardwareSpec::gpu_tflops},
    {"gpu_memory_GiB", &HardwareSpec::gpu_memory_GiB},
    {"gpu_memory_reserved_GiB", &HardwareSpec::gpu_memory_reserved_GiB},
    {"cpu_cores", &HardwareSpec::cpu_cores},
    {"dram_GBps", &HardwareSpec::dram_GBps},
    {"cpu_gflops", &HardwareSpec::cpu_gflops},
};
}  // namespace

const std::vector<std::string>& hardware_fields() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> v;
        for (const auto& f : kFields) v.push_back(f.key);
        return v;
    }();
    return names;
}

double* hardware_field(HardwareSpec& h, const std::string& key) {
    for (const auto& f : kFields)
        if (key == f.key) return &(h.*(f.member));
    return nullptr;
}

double hardware_field(const HardwareSpec& h, const std::string& key) {
    for (const auto& f : kFields)
        if (key == f.key) return h.*(f.member);
    return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace retro
