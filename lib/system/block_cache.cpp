#include "system/block_cache.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <list>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "core/error.hpp"

namespace retro {

int cache_block_tokens(int block_bytes, int head_dim, double elem_bytes) {
    return std::max(1, (int)(block_bytes / (head_dim * elem_bytes)));
}

int64_t cache_capacity_slots(double fraction, double cache_bytes, int prompt_len, int head_dim, double elem_bytes,
                             int block_tokens) {
    const double tok = 2.0 * head_dim * elem_bytes;
    const double slots = cache_bytes > 0 ? cache_bytes / tok : fraction * prompt_len;
    return (int64_t)std::floor(slots / block_tokens) * block_tokens;
}

CachePolicy parse_cache_policy(const std::string& s) {
    if (s == "lru") return CachePolicy::lru;
    if (s == "lfu") return CachePolicy::lfu;
    if (s == "fifo") return CachePolicy::fifo;
    if (s == "clock") return CachePolicy::clock;
    if (s == "belady") return CachePolicy::belady;
    throw ParamError("parameter 'policy' = \"" + s + "\": expected lru|lfu|fifo|clock|belady");
}

const char* cache_policy_name(CachePolicy p) {
    switch (p) {
        case CachePolicy::lru: return "lru";
        case CachePolicy::lfu: return "lfu";
        case CachePolicy::fifo: return "fifo";
        case CachePolicy::clock: return "clock";
        default: return "belady";
    }
}

namespace {
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
using Key = std::tuple<int64_t, int64_t, int64_t>;  // (k1, k2, id); the smallest is the next victim
}  // namespace

struct BlockCache::Impl {
    struct Entry {
        int32_t slots = 0;
        int64_t k1 = 0, k2 = 0;
        int64_t freq = 0;
        int64_t next_use = kNever;
        bool ref = false;
        std::list<int64_t>::iterator pos;
    };
    std::unordered_map<int64_t, Entry> map;  // the cluster mapping table (resident units)
    std::set<Key> order;                     // victim order for lru/lfu/fifo/belady
    std::list<int64_t> ring;                 // CLOCK ring
    std::list<int64_t>::iterator hand = ring.end();
    int64_t tick = 0;
};

BlockCache::BlockCache(CacheParams p) : impl_(new Impl), p_(p) {
    if (p_.capacity_slots < 0) throw ParamError("parameter 'capacity_slots' must be >= 0");
    if (p_.admit_cap_slots < 0) throw ParamError("parameter 'admit_cap_slots' must be >= 0");
}
BlockCache::~BlockCache() { delete impl_; }
BlockCache::BlockCache(BlockCache&& o) noexcept : impl_(o.impl_), p_(o.p_), used_(o.used_) { o.impl_ = nullptr; }
BlockCache& BlockCache::operator=(BlockCache&& o) noexcept {
    std::swap(impl_, o.impl_);
    std::swap(p_, o.p_);
    std::swap(used_, o.used_);
    return *this;
}
size_t BlockCache::size() const { return impl_->map.size(); }
bool BlockCache::contains(int64_t id) const { return impl_->map.count(id) > 0; }

StepTraffic BlockCache::step(const std::vector<UnitRequest>& req, const std::vector<int64_t>* next_use) {
    Impl& c = *impl_;
    const CachePolicy pol = p_.policy;
    if (pol == CachePolicy::belady && (!next_use || next_use->size() != req.size()))
        throw ParamError("Belady's policy needs the next use of every requested unit (offline replay)");
    auto nu = [&](size_t i) { return next_use ? (*next_use)[i] : kNever; };
    StepTraffic tr;
    std::unordered_set<int64_t> pinned;
    pinned.reserve(req.size() * 2);
    std::vector<char> hit(req.size(), 0);
    for (size_t i = 0; i < req.size(); ++i) {
        const UnitRequest& u = req[i];
        if (!pinned.insert(u.id).second) throw ParamError("unit " + std::to_string(u.id) + " requested twice in one step");
        hit[i] = c.map.count(u.id) ? 1 : 0;
        if (hit[i]) {
            ++tr.hit_units;
            tr.hit_slots += u.slots;
            tr.hit_tokens += u.tokens;
        } else {
            ++tr.miss_units;
            tr.miss_slots += u.slots;
            tr.miss_tokens += u.tokens;
        }
    }
    auto rekey = [&](int64_t id, Impl::Entry& e, int64_t k1, int64_t k2) {
        c.order.erase({e.k1, e.k2, id});
        e.k1 = k1;
        e.k2 = k2;
        c.order.insert({k1, k2, id});
    };
    // ---- update: refresh hits in reverse rank order ----
    for (size_t i = req.size(); i-- > 0;) {
        if (!hit[i]) continue;
        const int64_t id = req[i].id;
        Impl::Entry& e = c.map[id];
        switch (pol) {
            case CachePolicy::lru: rekey(id, e, ++c.tick, 0); break;
            case CachePolicy::lfu: ++e.freq; rekey(id, e, e.freq, ++c.tick); break;
            case CachePolicy::fifo: break;
            case CachePolicy::clock: e.ref = true; break;
            case CachePolicy::belady: e.next_use = nu(i); rekey(id, e, -e.next_use, ++c.tick); break;
        }
    }
    auto evict = [&](int64_t id) {
        auto it = c.map.find(id);
        Impl::Entry& e = it->second;
        if (pol == CachePolicy::clock) {
            if (c.hand == e.pos) ++c.hand;
            c.ring.erase(e.pos);
        } else {
            c.order.erase({e.k1, e.k2, id});
        }
        used_ -= e.slots;
        tr.evicted_slots += e.slots;
        c.map.erase(it);
    };
    // ---- update: admit misses in rank order ----
    int64_t admitted = 0;
    // Free slots plus the slots of entries not requested this step only shrink during a step (an eviction
    // moves slots from one to the other, an admission uses free slots for a requested unit), so once a
    // victim scan fails for a unit of `s` slots, every later unit of >= s slots fails too: skip its scan
    // (O(cache) each; with every entry pinned, a step of n misses cost O(n x cache) for nothing).
    int64_t failed_slots = std::numeric_limits<int64_t>::max();
    for (size_t i = 0; i < req.size(); ++i) {
        if (hit[i]) continue;
        const UnitRequest& u = req[i];
        if (u.slots <= 0 || u.slots > p_.capacity_slots) continue;
        if (p_.admit_cap_slots > 0 && admitted + u.slots > p_.admit_cap_slots) break;
        const int64_t my_next = nu(i);
        if (pol == CachePolicy::belady && my_next == kNever) continue;  // never needed again: bypass
        if (pol == CachePolicy::clock) {
            // classic second-chance sweep; entries needed this step are skipped
            size_t guard = 2 * c.ring.size() + 2;
            while (p_.capacity_slots - used_ < u.slots && !c.ring.empty() && guard-- > 0) {
                if (c.hand == c.ring.end()) c.hand = c.ring.begin();
                const int64_t id = *c.hand;
                Impl::Entry& e = c.map[id];
                if (pinned.count(id)) {
                    ++c.hand;
                } else if (e.ref) {
                    e.ref = false;
                    ++c.hand;
                } else {
                    evict(id);
                }
            }
        } else {
            // victims in policy order, skipping entries needed this step; all-or-nothing
            if (u.slots >= failed_slots) continue;
            std::vector<int64_t> victims;
            int64_t freed = p_.capacity_slots - used_;
            bool bypass = false;
            for (auto it = c.order.begin(); it != c.order.end() && freed < u.slots; ++it) {
                const int64_t id = std::get<2>(*it);
                if (pinned.count(id)) continue;
                if (pol == CachePolicy::belady && c.map[id].next_use <= my_next) {
                    bypass = true;  // every remaining victim is needed sooner than this unit
                    break;
                }
                victims.push_back(id);
                freed += c.map[id].slots;
            }
            if (bypass) continue;
            if (freed < u.slots) {
                failed_slots = u.slots;
                continue;
            }
            for (int64_t id : victims) evict(id);
        }
        if (p_.capacity_slots - used_ < u.slots) continue;
        Impl::Entry e;
        e.slots = u.slots;
        e.freq = 1;
        e.next_use = my_next;
        switch (pol) {
            case CachePolicy::lru: e.k1 = ++c.tick; break;
            case CachePolicy::lfu: e.k1 = 1; e.k2 = ++c.tick; break;
            case CachePolicy::fifo: e.k1 = ++c.tick; break;
            case CachePolicy::belady: e.k1 = -my_next; e.k2 = ++c.tick; break;
            case CachePolicy::clock: break;
        }
        if (pol == CachePolicy::clock) {
            e.pos = c.ring.insert(c.hand, u.id);  // behind the hand: examined last
        } else {
            c.order.insert({e.k1, e.k2, u.id});
        }
        c.map.emplace(u.id, e);
        used_ += u.slots;
        admitted += u.slots;
        tr.admitted_slots += u.slots;
    }
    return tr;
}

std::vector<StepTraffic> simulate_cache(const std::vector<std::vector<UnitRequest>>& steps, const CacheParams& p) {
    BlockCache cache(p);
    std::vector<StepTraffic> out;
    out.reserve(steps.size());
    std::vector<std::vector<int64_t>> next(steps.size());
    if (p.policy == CachePolicy::belady) {
        std::unordered_map<int64_t, int64_t> seen;  // unit -> the earliest later step needing it
        for (size_t t = steps.size(); t-- > 0;) {
            next[t].resize(steps[t].size());
            for (size_t i = 0; i < steps[t].size(); ++i) {
                auto it = seen.find(steps[t][i].id);
                next[t][i] = it == seen.end() ? kNever : it->second;
            }
            for (const auto& u : steps[t]) seen[u.id] = (int64_t)t;
        }
    }
    for (size_t t = 0; t < steps.size(); ++t)
        out.push_back(cache.step(steps[t], p.policy == CachePolicy::belady ? &next[t] : nullptr));
    return out;
}

void token_unit_requests(const std::vector<int32_t>& fetch_tokens, int token_block, bool needed_only, int n,
                         std::vector<UnitRequest>& out) {
    out.clear();
    std::unordered_map<int64_t, size_t> at;
    for (int32_t tok : fetch_tokens) {
        const int64_t u = tok / token_block;
        const auto [it, fresh] = at.emplace(u, out.size());
        if (fresh) {
            const int32_t begin = (int32_t)(u * token_block);
            const int32_t moved = needed_only ? 1 : std::min(token_block, std::max(1, n - begin));
            out.push_back({u, moved, token_block});
        } else if (needed_only) {
            ++out[it->second].tokens;  // one more requested token of this unit
        }
    }
}

}  // namespace retro
