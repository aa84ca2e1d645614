#include "run/host_pool.hpp"

#include <algorithm>

namespace retro::gpu_run {

HostPool::HostPool(int threads) {
    if (threads <= 0) threads = (int)std::max(1u, std::thread::hardware_concurrency());
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

HostPool::~HostPool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

// Takes items until none is left (mu_ held on entry and exit).
void HostPool::drain() {
    while (next_ < n_) {
        const int i = next_++;
        const auto* fn = fn_;
        mu_.unlock();
        try {
            (*fn)(i);
        } catch (...) {
            std::lock_guard<std::mutex> lk(mu_);
            if (!error_) error_ = std::current_exception();
        }
        mu_.lock();
    }
}

void HostPool::work() {
    std::unique_lock<std::mutex> lk(mu_);
    long seen = generation_;
    for (;;) {
        wake_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        ++busy_;
        drain();
        if (--busy_ == 0) done_.notify_all();
    }
}

void HostPool::for_each(int n, const std::function<void(int)>& fn) {
    if (n <= kSerialItems || workers_.empty()) {  // waking the workers costs more than a few items
        for (int i = 0; i < n; ++i) fn(i);
        return;
    }
    std::unique_lock<std::mutex> lk(mu_);
    fn_ = &fn, n_ = n, next_ = 0, error_ = nullptr;
    ++generation_;
    wake_.notify_all();
    drain();
    done_.wait(lk, [&] { return busy_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
}

}  // namespace retro::gpu_run
