// GPU block cache: policies against hand-worked sequences, Belady's optimality on random sequences,
// full-size and zero-size caches, admission cap, async update, conservation.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/error.hpp"
#include "system/block_cache.hpp"

using namespace retro;

namespace {
// One unit (1 slot, 1 token) per step; returns "H"/"M" per step.
std::string cache_pattern(CachePolicy pol, int cap, const std::string& seq) {
    std::vector<std::vector<UnitRequest>> steps;
    for (char ch : seq) steps.push_back({UnitRequest{(int64_t)ch, 1, 1}});
    CacheParams p;
    p.capacity_slots = cap;
    p.policy = pol;
    std::string out;
    for (const auto& t : simulate_cache(steps, p)) out += t.hit_units ? 'H' : 'M';
    return out;
}
int64_t total_misses(const std::vector<StepTraffic>& tr) {
    int64_t m = 0;
    for (const auto& t : tr) m += t.miss_slots;
    return m;
}
}  // namespace

TEST(BlockCache, LruHandWorked) {
    // cap 3: A B C | A hit | D evicts B | B evicts C | E evicts A | A evicts D
    EXPECT_EQ(cache_pattern(CachePolicy::lru, 3, "ABCADBEA"), "MMMHMMMM");
    EXPECT_EQ(cache_pattern(CachePolicy::lru, 3, "ABCADAB"), "MMMHMHM");
}

TEST(BlockCache, FifoHandWorked) {
    // the hit on A does not save it: D evicts A (oldest), then A evicts B, B evicts C
    EXPECT_EQ(cache_pattern(CachePolicy::fifo, 3, "ABCADAB"), "MMMHMMM");
}

TEST(BlockCache, LfuHandWorked) {
    // A used twice (freq 2): D evicts B (freq 1, older than C), B evicts C, A still resident
    EXPECT_EQ(cache_pattern(CachePolicy::lfu, 3, "AABCDBA"), "MHMMMMH");
    // LRU on the same sequence evicts A at D
    EXPECT_EQ(cache_pattern(CachePolicy::lru, 3, "AABCDBA"), "MHMMMHM");
}

TEST(BlockCache, ClockHandWorked) {
    // A B C loaded (ref 0), A hit sets ref(A); D: hand clears A, evicts B; B: evicts C; A still there
    EXPECT_EQ(cache_pattern(CachePolicy::clock, 3, "ABCADBA"), "MMMHMMH");
    // without the hit, the hand evicts the oldest (A) first, like FIFO
    EXPECT_EQ(cache_pattern(CachePolicy::clock, 3, "ABCDA"), "MMMMM");
}

TEST(BlockCache, BeladyHandWorked) {
    // cap 2: C is never used again, so it bypasses the cache and A, B stay
    EXPECT_EQ(cache_pattern(CachePolicy::belady, 2, "ABCAB"), "MMMHH");
    EXPECT_EQ(cache_pattern(CachePolicy::lru, 2, "ABCAB"), "MMMMM");
    // D evicts B (next use farthest), not A
    EXPECT_EQ(cache_pattern(CachePolicy::belady, 2, "ABDADB"), "MMMHHM");
}

TEST(BlockCache, BeladyNeverWorseOnRandomSequences) {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        const int ids = 4 + (int)(rng() % 20), cap = 1 + (int)(rng() % 8), len = 20 + (int)(rng() % 60);
        std::vector<std::vector<UnitRequest>> steps;
        for (int t = 0; t < len; ++t) {
            std::vector<UnitRequest> s;
            const int k = 1 + (int)(rng() % std::min(cap, 4));
            std::vector<int> pool(ids);
            for (int i = 0; i < ids; ++i) pool[i] = i;
            std::shuffle(pool.begin(), pool.end(), rng);
            for (int i = 0; i < k; ++i) s.push_back({pool[i], 8, 8});
            steps.push_back(s);
        }
        CacheParams p;
        p.capacity_slots = cap * 8;
        p.policy = CachePolicy::belady;
        const int64_t opt = total_misses(simulate_cache(steps, p));
        for (auto pol : {CachePolicy::lru, CachePolicy::lfu, CachePolicy::fifo, CachePolicy::clock}) {
            p.policy = pol;
            EXPECT_LE(opt, total_misses(simulate_cache(steps, p))) << "trial " << trial << " " << cache_policy_name(pol);
        }
    }
}

TEST(BlockCache, FullSizeCacheHitsEverythingAfterWarmup) {
    std::mt19937 rng(3);
    std::vector<std::vector<UnitRequest>> steps;
    std::vector<int> sizes(50);
    int64_t total = 0;
    for (int i = 0; i < 50; ++i) {
        sizes[i] = 1 + (int)(rng() % 40);
        total += (sizes[i] + 7) / 8 * 8;
    }
    for (int t = 0; t < 100; ++t) {
        std::vector<UnitRequest> s;
        for (int i = 0; i < 50; ++i)
            if (rng() % 4 == 0) s.push_back({i, sizes[i], (sizes[i] + 7) / 8 * 8});
        steps.push_back(s);
    }
    for (auto pol : {CachePolicy::lru, CachePolicy::lfu, CachePolicy::fifo, CachePolicy::clock, CachePolicy::belady}) {
        CacheParams p;
        p.capacity_slots = total;
        p.policy = pol;
        const auto tr = simulate_cache(steps, p);
        std::vector<char> seen(50, 0);
        for (size_t t = 0; t < steps.size(); ++t) {
            int64_t first = 0;
            for (const auto& u : steps[t])
                if (!seen[u.id]) ++first, seen[u.id] = 1;
            EXPECT_EQ(tr[t].miss_units, first) << cache_policy_name(pol) << " step " << t;  // only cold misses
        }
    }
}

TEST(BlockCache, ZeroCapacityMovesExactlyTheSelectedBlocks) {
    std::vector<std::vector<UnitRequest>> steps = {{{1, 17, 24}, {2, 8, 8}}, {{1, 17, 24}, {3, 3, 8}}};
    CacheParams p;  // capacity 0
    const auto tr = simulate_cache(steps, p);
    EXPECT_EQ(tr[0].miss_tokens, 25);
    EXPECT_EQ(tr[0].miss_slots, 32);
    EXPECT_EQ(tr[1].miss_tokens, 20);
    EXPECT_EQ(tr[1].hit_units, 0);
    EXPECT_EQ(tr[1].admitted_slots, 0);
}

TEST(BlockCache, ConservationAndAsyncUpdate) {
    std::mt19937 rng(11);
    CacheParams p;
    p.capacity_slots = 64;
    for (auto pol : {CachePolicy::lru, CachePolicy::lfu, CachePolicy::fifo, CachePolicy::clock}) {
        p.policy = pol;
        BlockCache c(p);
        for (int t = 0; t < 200; ++t) {
            std::vector<UnitRequest> s;
            int64_t need_slots = 0, need_tokens = 0;
            for (int i = 0; i < 30; ++i)
                if (rng() % 5 == 0) {
                    const int tok = 1 + (int)(rng() % 20);
                    s.push_back({i, tok, (tok + 7) / 8 * 8});
                    need_slots += s.back().slots;
                    need_tokens += tok;
                }
            const auto tr = c.step(s);
            EXPECT_EQ(tr.hit_slots + tr.miss_slots, need_slots);
            EXPECT_EQ(tr.hit_tokens + tr.miss_tokens, need_tokens);
            EXPECT_EQ((int64_t)s.size(), tr.hit_units + tr.miss_units);
            EXPECT_LE(c.used_slots(), p.capacity_slots);
        }
    }
    // a unit missed at step t is admitted after the lookup and serves hits from t+1
    BlockCache c(p);
    EXPECT_EQ(c.step({{5, 8, 8}}).miss_units, 1);
    EXPECT_TRUE(c.contains(5));
    EXPECT_EQ(c.step({{5, 8, 8}}).hit_units, 1);
}

TEST(BlockCache, AdmissionInRankOrderWithCap) {
    CacheParams p;
    p.capacity_slots = 64;
    p.admit_cap_slots = 16;  // two 8-slot units per step
    BlockCache c(p);
    std::vector<UnitRequest> s = {{1, 8, 8}, {2, 8, 8}, {3, 8, 8}};
    auto t0 = c.step(s);
    EXPECT_EQ(t0.admitted_slots, 16);
    EXPECT_TRUE(c.contains(1));
    EXPECT_TRUE(c.contains(2));
    EXPECT_FALSE(c.contains(3));  // lowest rank is not admitted
    auto t1 = c.step(s);
    EXPECT_EQ(t1.hit_units, 2);
    EXPECT_EQ(t1.miss_units, 1);
    EXPECT_TRUE(c.contains(3));
}

TEST(BlockCache, HitsOfThisStepAreNeverEvicted) {
    CacheParams p;
    p.capacity_slots = 16;
    BlockCache c(p);
    c.step({{1, 8, 8}, {2, 8, 8}});
    // 1 and 2 hit; 3 misses but nothing else can be evicted: not admitted
    const auto t = c.step({{1, 8, 8}, {2, 8, 8}, {3, 8, 8}});
    EXPECT_EQ(t.hit_units, 2);
    EXPECT_EQ(t.evicted_slots, 0);
    EXPECT_FALSE(c.contains(3));
}

TEST(BlockCache, Errors) {
    EXPECT_THROW(parse_cache_policy("mru"), ParamError);
    CacheParams p;
    p.capacity_slots = 8;
    p.policy = CachePolicy::belady;
    BlockCache c(p);
    EXPECT_THROW(c.step({{1, 1, 1}}), ParamError);  // Belady online: no future
    p.policy = CachePolicy::lru;
    BlockCache d(p);
    EXPECT_THROW(d.step({{1, 1, 1}, {1, 1, 1}}), ParamError);
}
