#pragma once
// A small persistent pool of host threads for the wave path's per-(sequence, head) host work (the cache
// lookups and updates of RetroInfer's CPU buffer manager run on many cores; the cost model divides the
// lookup time by the profile's cpu_cores). std::thread only: the RETRO_GPU_ONLY build has no OpenMP.
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace retro::gpu_run {

class HostPool {
  public:
    /// threads <= 0: std::thread::hardware_concurrency() (at least 1). The caller's thread works too.
    explicit HostPool(int threads = 0);
    ~HostPool();
    HostPool(const HostPool&) = delete;
    HostPool& operator=(const HostPool&) = delete;

    /// Calls fn(i) for every i in [0, n), spread over the threads; returns when all are done. The first
    /// exception thrown by fn is rethrown here. Up to kSerialItems items run on the caller's thread alone:
    /// at batch 1 (8 KV heads) waking 15 workers took longer than the lookups themselves.
    void for_each(int n, const std::function<void(int)>& fn);
    static constexpr int kSerialItems = 8;
    int threads() const { return (int)workers_.size() + 1; }

  private:
    void work();
    void drain();

    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable wake_, done_;
    const std::function<void(int)>* fn_ = nullptr;
    int n_ = 0, next_ = 0, busy_ = 0;
    long generation_ = 0;
    bool stop_ = false;
    std::exception_ptr error_;
};

}  // namespace retro::gpu_run
