// Part of the CPU emulation of cuda_api.hpp (docs/cuda.md, "CPU emulation"): float32 like the kernels
// but written independently of them and of the lib/ references; "device" memory is host memory,
// launches run when a synchronization needs them (common/emulation_streams.hpp). Linked with the check
// bodies into retro_check_emulation (and with the run path into retro_backend_emulation), it tests the
// checks themselves (input layouts, references, tolerances, poisoning) on machines without a GPU. It says
// nothing about the CUDA kernels.
// This file: the runtime (runtime_api.hpp).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/emulation_streams.hpp"
#include "common/emulation_trace.hpp"
#include "common/registry.hpp"
#include "core/error.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

// What a stream capture (ThreadLocal mode) refuses inside a step graph's body — a wait, an event, a
// synchronizing call (a synchronous copy, an allocation or a free, cudaMemset on the legacy stream,
// device_status's cudaFree(0)) — refused here too, naming it: on a GPU the capture fails, or the row.
static void not_in_graph(const char* what) {
    if (emu::recording())
        throw StepGraphError(std::string("step graph: ") + what +
                             " inside a captured body (a capture refuses it: it waits, synchronizes or is timed)");
}
std::string device_status() {
    not_in_graph("device_status (cudaFree(0))");
    return "";
}
bool device_available() { return true; }
std::string device_name() { return "CPU emulation (not a GPU)"; }
int device_cc() { return 0; }
double device_fp32_peak() { return 0; }
int device_sms() { return 0; }
// Every allocation's range, for emu::device_visible (a kernel's pointer arguments must lie in one).
namespace {
std::mutex g_alloc_mu;
std::map<uintptr_t, size_t> g_allocs;  // begin -> bytes
}  // namespace
bool emu::device_visible(const void* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const std::lock_guard<std::mutex> lk(g_alloc_mu);
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return false;
    --it;
    return a <= it->first + it->second;  // one past the end included (an empty range's pointer)
}
// New memory holds the checks' poison (0xFF: NaN in fp32 and fp16, -1 in the integers), not the zeros a
// fresh page happens to hold: what reads memory nothing wrote (or reads it before a copy into it ran) reads
// garbage, as on a GPU, instead of a plausible value.
void* dev_alloc(size_t b) {
    not_in_graph("a device or pinned allocation");
    const size_t n = (b + 255) / 256 * 256;
    void* p = std::aligned_alloc(256, n + (n == 0) * 256);
    if (!p) throw Error("cuda emulation: out of memory allocating " + std::to_string(b) + " bytes");
    std::memset(p, 0xFF, n);
    const std::lock_guard<std::mutex> lk(g_alloc_mu);
    g_allocs[reinterpret_cast<uintptr_t>(p)] = n;
    return p;
}
// cudaFree and cudaFreeHost wait for the device's work (what is queued may still read the memory)
void dev_free(void* p) {
    if (!p) return;
    not_in_graph("a free");
    emu::run_all();
    {
        const std::lock_guard<std::mutex> lk(g_alloc_mu);
        g_allocs.erase(reinterpret_cast<uintptr_t>(p));
    }
    std::free(p);
}
void* pinned_alloc(size_t b) { return dev_alloc(b); }
void pinned_free(void* p) { dev_free(p); }
// The synchronous copies wait for every stream's earlier work (the legacy default stream), and the host
// for them. A copy of 0 bytes may name null pointers (an empty table: cudaMemcpy takes it); memcpy may not.
static void copy_now(void* d, const void* s, size_t b) {
    not_in_graph("a synchronous copy");
    emu::run_all();
    if (b) std::memcpy(d, s, b);
}
void copy_h2d(void* d, const void* s, size_t b) { copy_now(d, s, b); }
void copy_d2h(void* d, const void* s, size_t b) { copy_now(d, s, b); }
void copy_d2d(void* d, const void* s, size_t b) { copy_now(d, s, b); }
// the asynchronous ones read their source when they run, as the copy engine does
void copy_h2d_async(void* d, const void* s, size_t b, void* st) {
    emu::launch("copy_h2d_async", d, s, b);
    if (b) emu::enqueue(st, [=] { std::memcpy(d, s, b); });
}
void dev_memset(void* d, int x, size_t b) {  // cudaMemset: on the legacy default stream, the host goes on
    not_in_graph("cudaMemset on the legacy default stream");
    emu::enqueue(nullptr, [=] { std::memset(d, x, b); });
}
void synchronize() {
    not_in_graph("cuda::synchronize");
    emu::run_all();
}
void copy_d2h_async(void* d, const void* s, size_t b, void* st) {
    emu::launch("copy_d2h_async", d, s, b);
    if (b) emu::enqueue(st, [=] { std::memcpy(d, s, b); });
}
void copy_2d_async(void* d, size_t dp, const void* s, size_t sp, size_t w, size_t rows, void* st) {
    emu::launch("copy_2d_async", d, dp, s, sp, w, rows);
    emu::enqueue(st, [=] {
        for (size_t i = 0; i < rows; ++i) std::memcpy((char*)d + i * dp, (const char*)s + i * sp, w);
    });
}
size_t device_free_bytes() { return (size_t)1 << 40; }
Stream::Stream() : s_(emu::new_stream()) {}
Stream::~Stream() { emu::delete_stream(s_); }
void Stream::synchronize() {
    not_in_graph("a stream synchronize");
    emu::run_stream(s_);
}
// The emulated event (behind Event::e_): where it was recorded and the host clock when the stream got there.
namespace {
struct EmuEvent {
    emu::EventMark at;
    double ms = 0;
};
EmuEvent* emu_event(void* e) { return static_cast<EmuEvent*>(e); }
double host_ms_now() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace
void Stream::wait(const Event& e) { emu::wait_for(s_, emu_event(e.get())->at); }
Event::Event() : e_(new EmuEvent) {}
Event::~Event() {
    emu::run_until(emu_event(e_)->at);  // its clock's update may be queued still
    delete emu_event(e_);
}
void Event::record(void* st) {  // the host clock when the stream reaches it
    not_in_graph("an event record");
    EmuEvent* ev = emu_event(e_);
    emu::enqueue(st, [ev] { ev->ms = host_ms_now(); });
    ev->at = emu::mark(st);
}
void Event::synchronize() {
    not_in_graph("an event synchronize");
    emu::run_until(emu_event(e_)->at);
}
float Event::ms_since(const Event& start) {
    emu::run_until(emu_event(start.e_)->at);
    synchronize();
    return (float)(emu_event(e_)->ms - emu_event(start.e_)->ms);
}
// A device's gate holds the stream until release() or its timeout. Eager streams cannot hold launches
// that ran at once: the gate remembers whether release() followed hold(), which is what a device's gate
// would report. Lazy streams queue the gate: when the stream runs, an unreleased gate is a timed-out one.
LaunchGate::LaunchGate(double timeout_us) : timeout_us_(timeout_us) {
    if (!(timeout_us > 0)) throw ParamError("cuda LaunchGate: timeout_us must be positive");
    flag_ = static_cast<int32_t*>(pinned_alloc(2 * sizeof(int32_t)));
    flag_[0] = 1, flag_[1] = 0;
}
LaunchGate::~LaunchGate() {
    release();  // as on a device: a gate left held ends before its flag is freed
    pinned_free(flag_);
}
void LaunchGate::hold(void* st) {
    flag_[0] = 0;
    if (!emu::lazy_streams()) {
        flag_[1] = 1;  // timed out unless release() follows
        return;
    }
    flag_[1] = 0;
    int32_t* f = flag_;
    emu::enqueue(st, [f] { f[1] = f[0] == 0; });
}
void LaunchGate::release() {
    flag_[0] = 1;
    if (!emu::lazy_streams()) flag_[1] = 0;
}
bool LaunchGate::timed_out() const { return flag_[1] != 0; }
EventTimer::EventTimer(void* s) : stream_(s) {}
EventTimer::~EventTimer() {}
void EventTimer::start() {}
void EventTimer::stop() {}
float EventTimer::elapsed_ms() {
    emu::run_stream(stream_);
    return 1;
}
// Fixed stand-in numbers (not a measurement): the runner's "hardware": "measured" path runs on them in tests.
DeviceCeilings measure_ceilings(bool) {
    DeviceCeilings c;
    c.d2d_bytes_per_s = 2.0e12, c.h2d_pinned_bytes_per_s = 25e9, c.d2h_pinned_bytes_per_s = 24e9;
    c.transfer_latency_us = 7.5, c.memory_bytes = 80.0 * (1 << 30);
    return c;
}
size_t device_total_bytes() { return (size_t)80 << 30; }

RETRO_KERNEL_EMULATION(common);

// StepGraph: body runs on every call (its launches queued as any); the capture's launches are recorded and a
// replay's compared with them
namespace {
thread_local std::vector<std::string>* g_record = nullptr;  // a capture is the capturing thread's (ThreadLocal)
thread_local void* g_capture_stream = nullptr;
thread_local int t_quiet = 0;  // Quiets alive on this thread
}  // namespace
bool emu::recording() { return g_record != nullptr; }
void emu::check_capture_stream(void* stream) {
    if (g_record && stream != g_capture_stream)
        throw StepGraphError("step graph: a launch on another stream than the captured one inside its body (on a GPU "
                             "it would run at once, outside the graph, or fail the capture on the legacy stream)");
}
bool emu::nested() { return t_quiet > 0 || emu::running(); }
emu::Quiet::Quiet() : saved_(g_record) { g_record = nullptr, ++t_quiet; }
emu::Quiet::~Quiet() { g_record = static_cast<std::vector<std::string>*>(saved_), --t_quiet; }
void emu::record_launch(std::string line) { g_record->push_back(std::move(line)); }

StepGraph::~StepGraph() = default;
void StepGraph::run_impl(uint64_t key, void* stream, void (*call)(void*), void* body) {
    std::vector<std::string> now;
    const auto t0 = std::chrono::steady_clock::now();
    g_record = &now, g_capture_stream = stream;
    try {
        call(body);
    } catch (...) {
        g_record = nullptr;
        throw;
    }
    g_record = nullptr;
    capture_us_ = 0;
    if (!have_ || key != key_) {  // a capture: its host time, the body's run
        capture_us_ = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        have_ = true, key_ = key, ++captures_;
        launches_ = std::move(now);
        return;
    }
    for (size_t i = 0; i < std::max(now.size(), launches_.size()); ++i) {
        const std::string got = i < now.size() ? now[i] : "(none)", want = i < launches_.size() ? launches_[i] : "(none)";
        if (got != want)
            throw StepGraphError(what_ + ": a replay under the same key launches other work than its capture (launch " +
                        std::to_string(i) + ": captured \"" + want + "\", now \"" + got +
                        "\"): on a GPU the graph would replay the captured arguments; the key misses what changed");
    }
}

}  // namespace retro::cuda
