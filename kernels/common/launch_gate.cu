// The launch gate (runtime_api.hpp LaunchGate): a kernel that holds the work queued behind it until the
// host releases it or its timeout passes.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "common/device.cuh"
#include "core/error.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

// ---------------------------------------------------------------------------------------------------
// The launch gate (runtime_api.hpp LaunchGate)
// ---------------------------------------------------------------------------------------------------

namespace {
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
// One thread polls the host's flag through the mapped page (a PCIe read per poll, ~1 us apart).
__global__ void gate_kernel(volatile int32_t* flag, unsigned long long timeout_ns) {
    const unsigned long long t0 = global_ns();
    while (flag[0] == 0) {
        if (global_ns() - t0 > timeout_ns) {
            flag[1] = 1;
            break;
        }
        __nanosleep(1000);
    }
}
}  // namespace

LaunchGate::LaunchGate(double timeout_us) : timeout_us_(timeout_us) {
    if (!(timeout_us > 0)) throw ParamError("cuda LaunchGate: timeout_us must be positive");
    flag_ = static_cast<int32_t*>(pinned_alloc(2 * sizeof(int32_t)));
    flag_[0] = 1, flag_[1] = 0;
}
LaunchGate::~LaunchGate() {
    release();  // a gate left held (an exception between hold and release): the kernel ends, not reads freed memory
    pinned_free(flag_);
}
void LaunchGate::hold(void* stream) {
    volatile int32_t* f = flag_;
    f[0] = 0, f[1] = 0;
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the cleared flag is visible before the launch
    gate_kernel<<<1, 1, 0, st(stream)>>>(f, (unsigned long long)(timeout_us_ * 1e3));
    check_launch("launch_gate");
}
void LaunchGate::release() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    static_cast<volatile int32_t*>(flag_)[0] = 1;
}
bool LaunchGate::timed_out() const { return static_cast<volatile int32_t*>(flag_)[1] != 0; }

}  // namespace retro::cuda
