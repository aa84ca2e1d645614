// CUDA runtime wrappers of runtime_api.hpp (host code; compiled by the host compiler).
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <string>

#include "core/error.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {
void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw Error(std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}
cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }
}  // namespace

std::string device_status() {
    // a failed call's error that did not break the context (a launch refused, an allocation) stays pending and
    // would fail the next launch's check: cleared here, where a caller asks after a failure whether to go on;
    // a sticky fault shows again at the calls below
    cudaGetLastError();
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n == 0) return "no CUDA device";
    // cudaFree(0) creates the context: a driver/runtime mismatch shows up here, not at the count.
    if (e == cudaSuccess) e = cudaFree(nullptr);
    if (e != cudaSuccess) {
        cudaGetLastError();  // clear the error so later calls start clean
        return cudaGetErrorString(e);
    }
    return "";
}

bool device_available() { return device_status().empty(); }

std::string device_name() {
    if (!device_available()) return "";
    cudaDeviceProp p{};
    check(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
    return p.name;
}

// The device's attributes, read without device_status()'s cudaFree(0): the select's and the estimation's
// launchers ask for them, maybe first inside a step graph's capture, where cudaFree is refused (a failed
// capture, and a 0 cached for the process: the split select and the wide estimation silently off). Cached
// once read; an error is not cached.
namespace {
int device_attribute(cudaDeviceAttr a) {
    int n = 0, v = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0 || cudaDeviceGetAttribute(&v, a, 0) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return v;
}
int cached_attribute(std::atomic<int>& slot, int (*read)()) {
    int v = slot.load(std::memory_order_relaxed);
    if (v > 0) return v;
    v = read();
    if (v > 0) slot.store(v, std::memory_order_relaxed);
    return v;
}
}  // namespace

int device_cc() {
    static std::atomic<int> cc{0};
    return cached_attribute(cc, [] {
        const int major = device_attribute(cudaDevAttrComputeCapabilityMajor);
        return major > 0 ? major * 10 + device_attribute(cudaDevAttrComputeCapabilityMinor) : 0;
    });
}

int device_sms() {
    static std::atomic<int> sms{0};
    return cached_attribute(sms, [] { return device_attribute(cudaDevAttrMultiProcessorCount); });
}

double device_fp32_peak() {
    const int sms = device_sms();
    int khz = 0;
    if (sms == 0 || cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return (double)sms * khz * 1e3 * 128 * 2;
}

void* dev_alloc(size_t bytes) {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
}
void dev_free(void* p) {
    if (p) cudaFree(p);
}
void* pinned_alloc(size_t bytes) {
    void* p = nullptr;
    check(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc");
    return p;
}
void pinned_free(void* p) {
    if (p) cudaFreeHost(p);
}
void copy_h2d(void* d, const void* s, size_t b) { check(cudaMemcpy(d, s, b, cudaMemcpyHostToDevice), "h2d"); }
void copy_d2h(void* d, const void* s, size_t b) { check(cudaMemcpy(d, s, b, cudaMemcpyDeviceToHost), "d2h"); }
void copy_d2d(void* d, const void* s, size_t b) {
    check(cudaMemcpy(d, s, b, cudaMemcpyDeviceToDevice), "d2d");
}
void copy_h2d_async(void* d, const void* s, size_t b, void* stream) {
    check(cudaMemcpyAsync(d, s, b, cudaMemcpyHostToDevice, st(stream)), "h2d async");
}
void dev_memset(void* d, int byte, size_t b) { check(cudaMemset(d, byte, b), "cudaMemset"); }
void synchronize() { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

void copy_d2h_async(void* d, const void* s, size_t b, void* stream) {
    check(cudaMemcpyAsync(d, s, b, cudaMemcpyDeviceToHost, st(stream)), "d2h async");
}
void copy_2d_async(void* d, size_t dp, const void* s, size_t sp, size_t w, size_t rows, void* stream) {
    if (w == 0 || rows == 0) return;
    check(cudaMemcpy2DAsync(d, dp, s, sp, w, rows, cudaMemcpyDefault, st(stream)), "2d copy");
}
size_t device_free_bytes() {
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return free;
}
size_t device_total_bytes() {
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return total;
}

Stream::Stream() {
    cudaStream_t s;
    check(cudaStreamCreate(&s), "cudaStreamCreate");
    s_ = s;
}
Stream::~Stream() { cudaStreamDestroy(st(s_)); }
void Stream::synchronize() { check(cudaStreamSynchronize(st(s_)), "cudaStreamSynchronize"); }
void Stream::wait(const Event& e) {
    check(cudaStreamWaitEvent(st(s_), static_cast<cudaEvent_t>(e.get()), 0), "cudaStreamWaitEvent");
}

Event::Event() {
    cudaEvent_t e;
    check(cudaEventCreate(&e), "cudaEventCreate");
    e_ = e;
}
Event::~Event() { cudaEventDestroy(static_cast<cudaEvent_t>(e_)); }
void Event::record(void* stream) { check(cudaEventRecord(static_cast<cudaEvent_t>(e_), st(stream)), "event"); }
void Event::synchronize() { check(cudaEventSynchronize(static_cast<cudaEvent_t>(e_)), "cudaEventSynchronize"); }
float Event::ms_since(const Event& start) {
    synchronize();
    float ms = 0;
    check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.e_), static_cast<cudaEvent_t>(e_)), "elapsed");
    return ms;
}

EventTimer::EventTimer(void* stream) : stream_(stream) {
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
    a_ = a, b_ = b;
}
EventTimer::~EventTimer() {
    cudaEventDestroy(static_cast<cudaEvent_t>(a_));
    cudaEventDestroy(static_cast<cudaEvent_t>(b_));
}
void EventTimer::start() { check(cudaEventRecord(static_cast<cudaEvent_t>(a_), st(stream_)), "event"); }
void EventTimer::stop() { check(cudaEventRecord(static_cast<cudaEvent_t>(b_), st(stream_)), "event"); }
float EventTimer::elapsed_ms() {
    check(cudaEventSynchronize(static_cast<cudaEvent_t>(b_)), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(a_), static_cast<cudaEvent_t>(b_)), "elapsed");
    return ms;
}

StepGraph::~StepGraph() {
    if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

void StepGraph::run_impl(uint64_t key, void* stream, void (*call)(void*), void* body) {
    capture_us_ = 0;
    const auto graph_check = [&](cudaError_t e, const char* step) {
        if (e != cudaSuccess) throw StepGraphError("cuda: " + what_ + ": " + step + ": " + cudaGetErrorString(e));
    };
    if (!have_ || key != key_) {
        const auto t0 = std::chrono::steady_clock::now();
        if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_)), exec_ = nullptr;
        if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_)), graph_ = nullptr;
        have_ = false;
        graph_check(cudaStreamBeginCapture(st(stream), cudaStreamCaptureModeThreadLocal), "begin capture");
        cudaGraph_t g = nullptr;
        try {
            call(body);
        } catch (const std::exception& x) {  // a launch the capture refused (or the body's own error): the graph's failure
            cudaStreamEndCapture(st(stream), &g);  // the stream out of capture mode before the error goes on
            if (g) cudaGraphDestroy(g);
            cudaGetLastError();
            throw StepGraphError("cuda: " + what_ + ": capture: " + x.what());
        }
        graph_check(cudaStreamEndCapture(st(stream), &g), "end capture");
        graph_ = g;
        cudaGraphExec_t e = nullptr;
        graph_check(cudaGraphInstantiate(&e, g, 0), "instantiate");
        exec_ = e;
        have_ = true, key_ = key, ++captures_;
        capture_us_ = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    }
    graph_check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), st(stream)), "launch");
}

}  // namespace retro::cuda
