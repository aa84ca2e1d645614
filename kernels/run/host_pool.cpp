#include "run/host_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace retro::gpu_run {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}
}  // namespace

HostPool::HostPool(int threads, int spin_us, bool serial_if_one) : spin_us_(std::max(0, spin_us)) {
    // one core is left to the caller, which waits for the workers: a spinning caller on a full machine
    // would keep a worker off its core for a scheduler tick (milliseconds)
    if (threads <= 0) {  // hardware_concurrency() may say 0 (unknown): one worker then, not a wrapped count
        const unsigned hc = std::thread::hardware_concurrency();
        threads = hc > 1 ? (int)(hc - 1) : 1;
    }
    serial_ = threads == 1 && serial_if_one;
    if (serial_) return;
    for (int w = 0; w < threads; ++w) workers_.emplace_back([this, w] { work(w); });
}

HostPool::~HostPool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

void HostPool::work(int w) {
    using Clock = std::chrono::steady_clock;
    long seen = 0;
    for (;;) {
        // spin for spin_us, then sleep until the generation moves
        const auto t0 = Clock::now();
        int polls = 0;
        while (generation_.load(std::memory_order_acquire) == seen && !stop_.load(std::memory_order_acquire)) {
            cpu_relax();
            if (++polls % 64 == 0 && Clock::now() - t0 > std::chrono::microseconds(spin_us_)) {
                std::unique_lock<std::mutex> lk(mu_);
                wake_.wait(lk, [&] { return stop_.load() || generation_.load() != seen; });
            }
        }
        if (stop_.load()) return;
        const long g = generation_.load(std::memory_order_acquire);
        const bool has_work = (g & 1) == 0;  // odd generations are wake() calls: spin again, no work
        seen = g;
        if (!has_work) continue;
        const int n = n_, T = (int)workers_.size();
        const auto* fn = fn_;
        // a contiguous block of items per worker: the callers write per-item state side by side (a vector
        // of vectors' headers, lengths), and items handed out in turn put neighbours on different workers
        // at the same moment, every push_back then a cache line bouncing between cores
        const int lo = (int)((int64_t)n * w / T), hi = (int)((int64_t)n * (w + 1) / T);
        for (int i = lo; i < hi; ++i) {
            try {
                (*fn)(i);
            } catch (...) {
                std::lock_guard<std::mutex> lk(mu_);
                if (!error_) error_ = std::current_exception();
            }
        }
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

void HostPool::wake() {
    if (serial_) return;
    // an odd generation: workers leave their sleep and spin; pending_ stays 0 (no work)
    {
        std::lock_guard<std::mutex> lk(mu_);
        long g = generation_.load();
        generation_.store(g | 1, std::memory_order_release);  // even -> odd; odd stays odd (already woken)
        if (g & 1) generation_.store(g + 2, std::memory_order_release);  // a second wake: move on anyway
    }
    wake_.notify_all();
}

void HostPool::for_each(int n, bool parallel, const std::function<void(int)>& fn) {
    if (parallel) return for_each(n, fn);
    for (int i = 0; i < n; ++i) fn(i);
}

void HostPool::for_each(int n, const std::function<void(int)>& fn) {
    if (n <= 0) return;
    if (serial_) {  // one worker: the caller does the work itself, no hand-over
        for (int i = 0; i < n; ++i) fn(i);
        return;
    }
    {
        std::lock_guard<std::mutex> lk(mu_);
        fn_ = &fn, n_ = n, error_ = nullptr;
        pending_.store((int)workers_.size(), std::memory_order_release);
        const long g = generation_.load();
        generation_.store((g | 1) + 1, std::memory_order_release);  // the next even generation: work
    }
    wake_.notify_all();
    for (int polls = 0; pending_.load(std::memory_order_acquire) > 0; ++polls) {
        if (polls < 256) cpu_relax();
        else std::this_thread::yield();  // let a worker that shares this core finish
    }
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
}

}  // namespace retro::gpu_run
