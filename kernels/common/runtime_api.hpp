#pragma once
// Host API of the CUDA runtime the kernels run on (kernels/cuda_api.hpp, docs/cuda.md): device status,
// memory, copies, streams, events, the launch gate and the device's measured ceilings. Implemented by
// common/runtime.cpp and common/launch_gate.cu (the CUDA build), common/ceilings.cpp (measure_ceilings),
// and by common/runtime_emulation.cpp (the CPU emulation).
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace retro::cuda {


/// True when a CUDA device can be used (cudaGetDeviceCount > 0 and a context can be made).
bool device_available();
/// "" when a device is usable, else why not (no device, driver older than the runtime, ...).
std::string device_status();
/// Name of device 0 ("" when none) and its compute capability as major*10+minor.
std::string device_name();
int device_cc();
/// FP32 FMA peak of device 0 in FLOP/s: SMs * clock * 128 lanes * 2 (the sm_80/sm_90 SM); 0 if unknown.
double device_fp32_peak();
/// The device's SM count (0 without a device); read once.
int device_sms();

void* dev_alloc(size_t bytes);                  ///< cudaMalloc; throws on failure
void dev_free(void* p);                         ///< nullptr is ignored
void* pinned_alloc(size_t bytes);               ///< cudaHostAlloc(mapped | portable)
void pinned_free(void* p);
void copy_h2d(void* d_dst, const void* src, size_t bytes);
void copy_d2h(void* dst, const void* d_src, size_t bytes);
void copy_d2d(void* d_dst, const void* d_src, size_t bytes);
void copy_h2d_async(void* d_dst, const void* src, size_t bytes, void* stream = nullptr);
/// Fills bytes with `byte` (0xFF = NaN in both fp32 and fp16: the checks' poison).
void dev_memset(void* d_dst, int byte, size_t bytes);
void synchronize();
void copy_d2h_async(void* dst, const void* d_src, size_t bytes, void* stream = nullptr);
/// `rows` rows of `width` bytes, row i from src + i*spitch to dst + i*dpitch, any direction (device or
/// pinned host pointers, unified addressing: cudaMemcpy2DAsync with cudaMemcpyDefault).
void copy_2d_async(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows,
                   void* stream = nullptr);
/// Free device memory in bytes (cudaMemGetInfo).
size_t device_free_bytes();
/// Total device memory in bytes (cudaMemGetInfo).
size_t device_total_bytes();

/// The ceilings the kernels are measured against and the cost model is calibrated by ("hardware":
/// "measured"), measured on device 0 (kernels/common/ceilings.cpp).
struct DeviceCeilings {
    double d2d_bytes_per_s = 0;         ///< cudaMemcpy device->device, (read + write) bytes / time, 1 GiB
    double h2d_pinned_bytes_per_s = 0;  ///< cudaMemcpyAsync pinned host -> device, 512 MiB
    double d2h_pinned_bytes_per_s = 0;  ///< cudaMemcpyAsync device -> pinned host, same size
    double transfer_latency_us = 0;     ///< a 4-byte pinned H2D copy, issue to completion seen by the host
    double fp32_flop_per_s = 0;         ///< SMs * clock * 128 lanes * 2 (sm_80/sm_90 FP32 FMA peak); 0 unknown
    double memory_bytes = 0;            ///< device memory (device_total_bytes)
};
/// Medians of repeated copies; quick: 256 MiB / 128 MiB buffers and 5 repetitions (about a second).
DeviceCeilings measure_ceilings(bool quick);

class Event;

/// RAII CUDA stream (cudaStreamCreate); get() is what the launchers take as `stream`.
class Stream {
  public:
    Stream();
    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    void* get() const { return s_; }
    void synchronize();
    /// Work queued on this stream after the call waits for `e`'s recorded point on its own stream
    /// (cudaStreamWaitEvent; the host does not wait).
    void wait(const Event& e);

  private:
    void* s_ = nullptr;
};

/// RAII CUDA event: recorded on a stream, waited on by the host, timed against another event.
class Event {
  public:
    Event();
    ~Event();
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    void record(void* stream);
    void synchronize();
    /// Milliseconds from `start` to this event (both recorded); synchronizes on this one.
    float ms_since(const Event& start);
    void* get() const { return e_; }

  private:
    void* e_ = nullptr;  ///< cudaEvent_t (the CPU emulation: its own record, common/runtime_emulation.cpp)
};

/// nvbench's blocking kernel: hold(stream) enqueues a kernel that spins until release() (a flag in mapped
/// pinned memory) or until timeout_us has passed, so the work the host enqueues behind it runs back to
/// back, without the host's launch calls between its kernels; events recorded after hold() then time the
/// GPU's work alone, as a serving engine's captured step runs it. Release before waiting on the stream
/// (the gate ends by its timeout otherwise, and timed_out() says so).
class LaunchGate {
  public:
    explicit LaunchGate(double timeout_us = 20000);
    ~LaunchGate();
    LaunchGate(const LaunchGate&) = delete;
    LaunchGate& operator=(const LaunchGate&) = delete;
    void hold(void* stream);  ///< clears the flag, then enqueues the spinning kernel on `stream`
    void release();           ///< lets the held kernel end (idempotent)
    /// Whether the last held kernel ended by its timeout rather than by release(); read it after the
    /// stream has passed the gate (a synchronize). false for a gate never held.
    bool timed_out() const;

  private:
    int32_t* flag_ = nullptr;  ///< mapped pinned [2]: release flag, timed-out flag
    double timeout_us_;
};

/// The decode step's GPU work captured once as a CUDA graph and replayed (issue 40 #6: a batch-1 step is
/// ~12 dependent kernels of a few microseconds; launched as one graph they run without the gaps between
/// launches). run(key, stream, body): when `key` differs from the last capture's (or nothing is captured
/// yet) body is called once under stream capture (ThreadLocal mode) and the graph instantiated, replacing
/// the last one; then the graph is launched on `stream`. With the same key the graph is launched and body
/// not called. body must only enqueue work on `stream` whose arguments (pointers, scalars) are fixed for a
/// key — what changes from step to step lives in device memory — and must not record events or wait
/// (an event recorded in a capture cannot be timed), synchronize (a synchronous copy, cudaMemset on the
/// legacy stream, device_status's cudaFree), allocate or free, or launch on another stream. A failed capture
/// throws StepGraphError naming `what`; the emulation refuses each of those by name.
/// The CPU emulation runs body on every call and records its launches' arguments; a replay whose
/// arguments differ from its capture's throws Error naming the first differing launch (what the GPU would
/// silently replay with the captured ones), so the emulated runs check the key.
/// What StepGraph throws when a capture, instantiation or launch fails (or, in the emulation, when a replay
/// differs from its capture): a caller may drop the row that asked for the graph and go on.
class StepGraphError : public Error {
  public:
    using Error::Error;
};

class StepGraph {
  public:
    explicit StepGraph(std::string what = "step graph") : what_(std::move(what)) {}
    ~StepGraph();
    StepGraph(const StepGraph&) = delete;
    StepGraph& operator=(const StepGraph&) = delete;
    template <class Body>
    void run(uint64_t key, void* stream, const Body& body) {
        run_impl(key, stream, [](void* b) { (*static_cast<const Body*>(b))(); }, const_cast<Body*>(&body));
    }
    int captures() const { return captures_; }             ///< how many times body was captured
    double last_capture_us() const { return capture_us_; }  ///< host time of the last run()'s capture (0: a replay)

  private:
    void run_impl(uint64_t key, void* stream, void (*call)(void*), void* body);
    std::string what_;
    uint64_t key_ = 0;
    bool have_ = false;
    int captures_ = 0;
    double capture_us_ = 0;
    void* graph_ = nullptr;  ///< cudaGraph_t
    void* exec_ = nullptr;   ///< cudaGraphExec_t
    std::vector<std::string> launches_;  ///< the emulation: the capture's launches and their arguments
};

/// RAII device buffer of n elements of T.
template <class T>
class DeviceBuffer {
  public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t n) : n_(n), p_(static_cast<T*>(dev_alloc(n * sizeof(T) + (n == 0)))) {}
    ~DeviceBuffer() { dev_free(p_); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept : n_(o.n_), p_(o.p_) { o.p_ = nullptr, o.n_ = 0; }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        std::swap(n_, o.n_), std::swap(p_, o.p_);
        return *this;
    }
    T* get() const { return p_; }
    size_t size() const { return n_; }
    size_t bytes() const { return n_ * sizeof(T); }

  private:
    size_t n_ = 0;
    T* p_ = nullptr;
};

/// RAII pinned (page-locked, mapped) host buffer of n elements of T: readable by kernels through
/// unified addressing (zero-copy) and the source of asynchronous copies.
template <class T>
class PinnedBuffer {
  public:
    PinnedBuffer() = default;
    explicit PinnedBuffer(size_t n) : n_(n), p_(static_cast<T*>(pinned_alloc(n * sizeof(T) + (n == 0)))) {}
    ~PinnedBuffer() { pinned_free(p_); }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
    PinnedBuffer(PinnedBuffer&& o) noexcept : n_(o.n_), p_(o.p_) { o.p_ = nullptr, o.n_ = 0; }
    PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
        std::swap(n_, o.n_), std::swap(p_, o.p_);
        return *this;
    }
    T* get() const { return p_; }
    size_t size() const { return n_; }
    size_t bytes() const { return n_ * sizeof(T); }
    T& operator[](size_t i) const { return p_[i]; }

  private:
    size_t n_ = 0;
    T* p_ = nullptr;
};

/// Times GPU work between start() and stop() with CUDA events on `stream` (milliseconds).
class EventTimer {
  public:
    explicit EventTimer(void* stream = nullptr);
    ~EventTimer();
    EventTimer(const EventTimer&) = delete;
    EventTimer& operator=(const EventTimer&) = delete;
    void start();
    void stop();
    float elapsed_ms();  ///< synchronizes on the stop event

  private:
    void* stream_;
    void* a_ = nullptr;
    void* b_ = nullptr;
};

}  // namespace retro::cuda
