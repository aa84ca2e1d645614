// Part of the CPU emulation of cuda_api.hpp (docs/cuda.md, "CPU emulation"): float32 like the kernels
// but written independently of them and of the lib/ references; "device" memory is host memory,
// launches run at once. Linked with the check bodies into retro_check_emulation (and with the run path
// into retro_backend_emulation), it tests the checks themselves (input layouts, references, tolerances,
// poisoning) on machines without a GPU. It says nothing about the CUDA kernels.
// This file: the runtime (runtime_api.hpp).
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/registry.hpp"
#include "core/error.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

std::string device_status() { return ""; }
bool device_available() { return true; }
std::string device_name() { return "CPU emulation (not a GPU)"; }
int device_cc() { return 0; }
double device_fp32_peak() { return 0; }
int device_sms() { return 0; }
void* dev_alloc(size_t b) { return std::aligned_alloc(256, (b + 255) / 256 * 256); }
void dev_free(void* p) { std::free(p); }
void* pinned_alloc(size_t b) { return dev_alloc(b); }
void pinned_free(void* p) { std::free(p); }
// a copy of 0 bytes may name null pointers (an empty table: cudaMemcpy takes it); memcpy may not
void copy_h2d(void* d, const void* s, size_t b) { if (b) std::memcpy(d, s, b); }
void copy_d2h(void* d, const void* s, size_t b) { if (b) std::memcpy(d, s, b); }
void copy_d2d(void* d, const void* s, size_t b) { if (b) std::memcpy(d, s, b); }
void copy_h2d_async(void* d, const void* s, size_t b, void*) { if (b) std::memcpy(d, s, b); }
void dev_memset(void* d, int x, size_t b) { std::memset(d, x, b); }
void synchronize() {}
void copy_d2h_async(void* d, const void* s, size_t b, void*) { if (b) std::memcpy(d, s, b); }
void copy_2d_async(void* d, size_t dp, const void* s, size_t sp, size_t w, size_t rows, void*) {
    for (size_t i = 0; i < rows; ++i) std::memcpy((char*)d + i * dp, (const char*)s + i * sp, w);
}
size_t device_free_bytes() { return (size_t)1 << 40; }
Stream::Stream() {}
Stream::~Stream() {}
void Stream::synchronize() {}
Event::Event() {}
Event::~Event() {}
void Event::record(void*) {  // launches ran already: the host clock is the event's time
    host_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
void Event::synchronize() {}
float Event::ms_since(const Event& start) { return (float)(host_ms_ - start.host_ms_); }
// The gate cannot hold launches that run at once: it remembers whether release() followed hold(), which
// is what a device's gate would report as its timeout.
LaunchGate::LaunchGate(double timeout_us) : timeout_us_(timeout_us) {
    if (!(timeout_us > 0)) throw ParamError("cuda LaunchGate: timeout_us must be positive");
    flag_ = static_cast<int32_t*>(pinned_alloc(2 * sizeof(int32_t)));
    flag_[0] = 1, flag_[1] = 0;
}
LaunchGate::~LaunchGate() { pinned_free(flag_); }
void LaunchGate::hold(void*) { flag_[0] = 0, flag_[1] = 1; }
void LaunchGate::release() { flag_[0] = 1, flag_[1] = 0; }
bool LaunchGate::timed_out() const { return flag_[1] != 0; }
EventTimer::EventTimer(void* s) : stream_(s) {}
EventTimer::~EventTimer() {}
void EventTimer::start() {}
void EventTimer::stop() {}
float EventTimer::elapsed_ms() { return 1; }
// Fixed stand-in numbers (not a measurement): the runner's "hardware": "measured" path runs on them in tests.
DeviceCeilings measure_ceilings(bool) {
    DeviceCeilings c;
    c.d2d_bytes_per_s = 2.0e12, c.h2d_pinned_bytes_per_s = 25e9, c.d2h_pinned_bytes_per_s = 24e9;
    c.transfer_latency_us = 7.5, c.memory_bytes = 80.0 * (1 << 30);
    return c;
}
size_t device_total_bytes() { return (size_t)80 << 30; }

RETRO_KERNEL_EMULATION(common);

}  // namespace retro::cuda
