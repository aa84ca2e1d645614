#pragma once
// A small persistent pool of host threads for the wave path's per-(sequence, head) host work (the cache
// lookups and updates of RetroInfer's CPU buffer manager run on many cores; the cost model divides the
// lookup time by the profile's cpu_cores). std::thread only: the RETRO_GPU_ONLY build has no OpenMP.
//
// Why it spins and why items stay on their thread: on the H100 (2026-11-27) the lookups of one step took
// 247 us at batch 1 on the caller's thread and 489 us at batch 8 over 16 woken threads, where the same
// lookups with warm caches take ~5 us: a sleeping worker takes tens of microseconds to wake, and a
// (sequence, head) whose data moved to another core every step found its caches cold. So (1) workers
// spin on the generation counter for a while before sleeping, and wake() lets the caller start them
// spinning before the work is known (while the GPU ranks); (2) item i always runs on the same worker
// (a contiguous block of items per worker), so each (sequence, head)'s cache map and copy lists stay in
// one core's caches and neighbouring items' side-by-side state is written by one core (items handed out
// in turn, as before 2026-11-27, had every push_back of neighbouring items bounce a cache line).
// On the H200 (2026-11-27) 15 spinning workers still took 140-835 us for batch 1's ~1 us items: the
// wave path now hands work over only when there is enough of it, to at most 8 workers (wave_layer.cpp).
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace retro::gpu_run {

class HostPool {
  public:
    /// threads <= 0: hardware_concurrency() - 1 workers (at least 1; the caller keeps a core). spin_us:
    /// how long an idle worker polls for work before it sleeps.
    /// serial_if_one: with one worker (a 2-core machine) for_each runs on the caller instead.
    explicit HostPool(int threads = 0, int spin_us = 2000, bool serial_if_one = true);
    ~HostPool();
    HostPool(const HostPool&) = delete;
    HostPool& operator=(const HostPool&) = delete;

    /// Calls fn(i) for every i in [0, n): worker w takes the block [n*w/T, n*(w+1)/T) of T = threads()
    /// (the same worker for an item every call with the same n, its caches warm; neighbouring items on
    /// one worker, so their side-by-side state is not shared between cores); returns when all are done.
    /// The first exception thrown by fn is rethrown here.
    void for_each(int n, const std::function<void(int)>& fn);
    /// The same, on the caller's thread alone when !parallel (too little work to hand over).
    void for_each(int n, bool parallel, const std::function<void(int)>& fn);
    /// Makes sleeping workers spin (for spin_us) so that a for_each soon after starts at once.
    void wake();
    int threads() const { return serial_ ? 1 : (int)workers_.size(); }

  private:
    void work(int w);

    std::vector<std::thread> workers_;
    const int spin_us_;
    bool serial_ = false;
    std::atomic<long> generation_{0};  ///< bumped by for_each (work) and wake (no work)
    std::atomic<int> pending_{0};      ///< workers still on the current for_each
    std::atomic<bool> stop_{false};
    const std::function<void(int)>* fn_ = nullptr;
    int n_ = 0;
    std::mutex mu_;  ///< guards error_ and the sleep/wake handshake
    std::condition_variable wake_;
    std::exception_ptr error_;
};

}  // namespace retro::gpu_run
