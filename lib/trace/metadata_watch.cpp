#include "trace/metadata_watch.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>

namespace retro {

namespace {

using Clock = std::chrono::steady_clock;

struct Entry {
    std::string path;
    Clock::time_point since;
};

struct Registry {
    std::mutex mu;
    unsigned long long next_id = 0;
    std::map<unsigned long long, Entry> reads;  ///< by id; ids grow, so the first entry is the oldest
};

Registry& registry() {
    static Registry r;
    return r;
}

// ---- the signal-safe view: fixed slots in static storage, read by metadata_read_on_this_thread ----

/// A slot's owner: 0 = free, kClaimed = being filled, else the reading thread's kernel thread id.
using Owner = std::atomic<long>;
static_assert(Owner::is_always_lock_free, "a signal handler may only read lock-free atomics");
constexpr long kClaimed = -1;

struct Slot {
    Owner owner{0};
    char path[kMaxWatchedPathBytes];
};
Slot g_slots[kMaxWatchedReads];  // zero-initialized before any code runs: no construction-order issue

/// The kernel's id of the calling thread (gettid is a plain system call: async-signal-safe).
long this_thread_id() noexcept { return static_cast<long>(::syscall(SYS_gettid)); }

/// Claims a free slot for `path` on this thread; -1 when every slot is taken.
int claim_slot(const std::string& path) noexcept {
    for (int i = 0; i < kMaxWatchedReads; ++i) {
        long expected = 0;
        if (!g_slots[i].owner.compare_exchange_strong(expected, kClaimed)) continue;
        const size_t n = std::min(path.size(), size_t(kMaxWatchedPathBytes - 1));
        path.copy(g_slots[i].path, n);
        g_slots[i].path[n] = '\0';
        g_slots[i].owner.store(this_thread_id(), std::memory_order_release);  // path complete before
        return i;
    }
    return -1;
}

}  // namespace

const char* metadata_read_on_this_thread() noexcept {
    const long me = this_thread_id();
    for (const Slot& s : g_slots)
        if (s.owner.load(std::memory_order_acquire) == me) return s.path;
    return nullptr;
}

std::optional<MetadataRead> longest_metadata_read() {
    auto& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    if (r.reads.empty()) return std::nullopt;
    const Entry& e = r.reads.begin()->second;
    return MetadataRead{e.path, std::chrono::duration<double>(Clock::now() - e.since).count()};
}

MetadataReadScope::MetadataReadScope(const std::string& path) {
    {
        auto& r = registry();
        std::lock_guard<std::mutex> lk(r.mu);
        id_ = r.next_id++;
        r.reads.emplace(id_, Entry{path, Clock::now()});
    }
    slot_ = claim_slot(path);
}

MetadataReadScope::~MetadataReadScope() {
    if (slot_ >= 0) g_slots[slot_].owner.store(0, std::memory_order_release);
    auto& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    r.reads.erase(id_);
}

}  // namespace retro
