#pragma once
// Helpers of the kernel checks (<family>/<family>_checks.cpp): tolerances, random fp16 and float inputs,
// device upload/download and the outputs' poison. Host code over runtime_api.hpp.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/runtime_api.hpp"
#include "core/check.hpp"
#include "core/half.hpp"

namespace retro::cuda::check_util {

// Tolerances. Inputs are rounded to fp16 once and the CPU reference reads the same rounded values, so
// what is compared is fp32 accumulation (GPU, __expf) against double accumulation (CPU): relative L2
// errors are ~1e-6; the bounds leave room for long sums and fast exp without hiding real bugs (a wrong
// index or a missed token moves the output by far more than 1e-3).
inline constexpr double kTolAttention = 1e-3;
inline constexpr double kTolLse = 1e-4;
inline constexpr double kTolAgg = 1e-4;

inline std::string fmt(const char* f, double a = 0, double b = 0, double c = 0, double d = 0, double e = 0) {
    char buf[256];
    std::snprintf(buf, sizeof buf, f, a, b, c, d, e);
    return buf;
}

// fp16 bits [n] and their float values [n] (the reference reads the floats).
struct Half {
    std::vector<uint16_t> bits;
    std::vector<float> f;
};
inline Half random_half(size_t n, std::mt19937& rng, float sigma = 1.0f) {
    std::normal_distribution<float> nd(0.0f, sigma);
    Half h;
    h.bits.resize(n);
    h.f.resize(n);
    for (size_t i = 0; i < n; ++i) {
        h.bits[i] = float_to_half(nd(rng));
        h.f[i] = half_to_float(h.bits[i]);
    }
    return h;
}
inline std::vector<float> random_float(size_t n, std::mt19937& rng, float sigma = 1.0f) {
    std::normal_distribution<float> nd(0.0f, sigma);
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng);
    return v;
}

template <class T>
DeviceBuffer<T> upload(const std::vector<T>& v) {
    DeviceBuffer<T> b(v.size());
    if (!v.empty()) copy_h2d(b.get(), v.data(), b.bytes());
    return b;
}
template <class T>
std::vector<T> download(const DeviceBuffer<T>& b) {
    std::vector<T> v(b.size());
    if (!v.empty()) copy_d2h(v.data(), b.get(), b.bytes());
    return v;
}
template <class T>
void poison(DeviceBuffer<T>& b) {
    dev_memset(b.get(), kPoisonByte, b.bytes());
}

inline float scale_of(int d) { return 1.0f / std::sqrt((float)d); }

}  // namespace retro::cuda::check_util
