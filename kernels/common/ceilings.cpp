// The device's ceilings the kernels are measured against (runtime_api.hpp: measure_ceilings): copy
// bandwidths, the latency of a small transfer, the FP32 peak and the memory. Part of the kernel library:
// retro-bench's "hardware": "measured" calls it too.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "common/bench_util.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

using bench_util::median_us;

DeviceCeilings measure_ceilings(bool quick) {
    DeviceCeilings c;
    const size_t n = quick ? (256u << 20) : (1u << 30);
    {
        DeviceBuffer<char> a(n), b(n);
        dev_memset(a.get(), 1, n);
        const double us = median_us([&] { copy_d2d(b.get(), a.get(), n); }, quick ? 5 : 10);
        c.d2d_bytes_per_s = 2.0 * n / (us * 1e-6);  // read + write
    }
    {
        const size_t m = quick ? (128u << 20) : (512u << 20);
        DeviceBuffer<char> d(m);
        void* h = pinned_alloc(m);
        std::fill_n(static_cast<char*>(h), m, 1);
        const double us = median_us([&] { copy_h2d_async(d.get(), h, m); }, quick ? 5 : 10);
        c.h2d_pinned_bytes_per_s = m / (us * 1e-6);
        const double us_back = median_us([&] { copy_d2h_async(h, d.get(), m); }, quick ? 5 : 10);
        c.d2h_pinned_bytes_per_s = m / (us_back * 1e-6);
        pinned_free(h);
    }
    {  // the fixed cost of one small transfer as the host sees it: issue, then wait for completion
        DeviceBuffer<int32_t> d(1);
        PinnedBuffer<int32_t> h(1);
        h[0] = 1;
        std::vector<double> t;
        for (int i = 0; i < 51; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            copy_h2d_async(d.get(), h.get(), sizeof(int32_t));
            synchronize();
            t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(t.begin(), t.end());
        c.transfer_latency_us = t[t.size() / 2];
    }
    c.fp32_flop_per_s = device_fp32_peak();
    c.memory_bytes = (double)device_total_bytes();
    return c;
}

}  // namespace retro::cuda
