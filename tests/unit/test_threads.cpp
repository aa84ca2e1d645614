// for_each_item (lib/core/threads.hpp): the host-side builds of the GPU path run through it.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/threads.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace retro {
namespace {

TEST(ForEachItem, RunsEveryItemOnceOnSeveralThreads) {
    for (int threads : {1, 2, 3, 8, 0}) {
        const int n = 37;
        std::vector<std::atomic<int>> calls(n);
        std::mutex mu;
        std::set<std::thread::id> ran_on;
        for_each_item(n, threads, [&](int i) {
            calls[(size_t)i].fetch_add(1);
            std::this_thread::sleep_for(std::chrono::milliseconds(1));  // long enough for each thread to take some
            std::lock_guard<std::mutex> lock(mu);
            ran_on.insert(std::this_thread::get_id());
        });
        for (int i = 0; i < n; ++i) EXPECT_EQ(calls[(size_t)i].load(), 1) << "item " << i << ", threads " << threads;
        if (threads == 1) {
            EXPECT_EQ(ran_on, std::set<std::thread::id>{std::this_thread::get_id()});
        } else if (threads >= 2) {
            EXPECT_GE(ran_on.size(), 2u) << threads << " threads asked";
        }
        EXPECT_LE(ran_on.size(), (size_t)(threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency())));
    }
}

TEST(ForEachItem, NoItemsNoCall) {
    bool called = false;
    for_each_item(0, 4, [&](int) { called = true; });
    for_each_item(-3, 4, [&](int) { called = true; });
    EXPECT_FALSE(called);
}

TEST(ForEachItem, MoreThreadsThanItems) {
    std::vector<int> out(3, 0);
    for_each_item(3, 64, [&](int i) { out[(size_t)i] = 10 * i + 1; });
    EXPECT_EQ(out, (std::vector<int>{1, 11, 21}));
}

TEST(ForEachItem, RethrowsTheLowestFailingItemAfterEveryItemRan) {
    std::atomic<int> ran{0};
    try {
        for_each_item(20, 4, [&](int i) {
            ++ran;
            if (i == 13 || i == 5) throw std::runtime_error("item " + std::to_string(i));
        });
        FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "item 5");
    }
    EXPECT_EQ(ran.load(), 20);
}

TEST(ForEachItem, ItemsRunWithOneComputeThreadAndTheCountsComeBack) {
    const int original = compute_threads();
    set_compute_threads(2);
    const int before = compute_threads();
    std::atomic<int> wider{0};
    for_each_item(6, 3, [&](int) {
        if (compute_threads() != 1) ++wider;  // an item's own OpenMP loops and BLAS calls stay on its thread
    });
    EXPECT_EQ(wider.load(), 0);
    EXPECT_EQ(compute_threads(), before);  // BLAS's and the caller's OpenMP team restored
#ifdef _OPENMP
    EXPECT_EQ(omp_get_max_threads(), 2);
#endif
    set_compute_threads(original);
}

}  // namespace
}  // namespace retro
