// The results-directory lock (bench/results_lock.hpp) and temp-file ownership (core/temp_files.hpp):
// an unsharded lock excludes everything, shards coexist with each other but not with an unsharded run or
// a second copy of themselves, a refusal names the holder, and only dead writers' temp files are removed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "bench/results_lock.hpp"
#include "core/fs.hpp"
#include "core/temp_files.hpp"
#include "scratch_dir.hpp"

using namespace retro;
namespace fs = std::filesystem;

namespace {

ResultsLockRequest unsharded(const std::string& cmd = "test") {
    ResultsLockRequest r;
    r.command = cmd;
    r.settle_ms = 0;  // a refusal is immediate here (no other process probes)
    return r;
}
ResultsLockRequest shard(int i, int n) {
    ResultsLockRequest r = unsharded("shard");
    r.shard_index = i;
    r.shard_count = n;
    return r;
}
/// A PID that is certainly not running: a child that has exited and been reaped.
long dead_pid() {
    const pid_t p = fork();
    if (p == 0) _exit(0);
    waitpid(p, nullptr, 0);
    return (long)p;
}

}  // namespace

TEST(ResultsLock, SecondUnshardedLockIsRefusedNamingTheHolder) {
    test::ScratchDir d;
    const std::string dir = d.path + "/res";
    ResultsLock first(dir, unsharded("retro-bench run a.json"));
    EXPECT_TRUE(first.exclusive());
    EXPECT_TRUE(fs::exists(dir + "/.lock"));
    try {
        ResultsLock second(dir, unsharded());
        FAIL() << "a second exclusive lock must be refused";
    } catch (const ResultsBusy& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("is in use by PID " + std::to_string(getpid()) + " on host " + this_host()), std::string::npos)
            << msg;
        EXPECT_NE(msg.find("`retro-bench run a.json`"), std::string::npos) << msg;
        EXPECT_NE(msg.find("--wait-lock"), std::string::npos) << msg;
        ASSERT_EQ(e.holders().size(), 1u);
        EXPECT_EQ(e.holders()[0].pid, (long)getpid());
    }
}

TEST(ResultsLock, ReleasedOnDestructionAndWaitBlocksUntilThen) {
    test::ScratchDir d;
    auto first = std::make_unique<ResultsLock>(d.path, unsharded());
    std::string waited_for;
    std::thread release([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        first.reset();
    });
    ResultsLockRequest req = unsharded();
    req.wait = true;
    req.on_wait = [&](const std::string& s) { waited_for = s; };
    ResultsLock second(d.path, req);  // returns once `first` is gone
    release.join();
    EXPECT_EQ(first, nullptr);
    EXPECT_NE(waited_for.find("waiting for " + d.path + ", in use by PID"), std::string::npos) << waited_for;
}

TEST(ResultsLock, ShardsCoexistButExcludeUnshardedRunsAndTheirOwnCopies) {
    test::ScratchDir d;
    ResultsLock s0(d.path, shard(0, 2));
    ResultsLock s1(d.path, shard(1, 2));  // another shard: fine
    EXPECT_FALSE(s0.exclusive());
    EXPECT_EQ(s1.holder().lock, ".lock-shard-1-of-2");
    EXPECT_THROW(ResultsLock(d.path, shard(1, 2)), ResultsBusy);  // the same shard twice
    try {
        ResultsLock all(d.path, unsharded());
        FAIL() << "an unsharded run must not start while shards run";
    } catch (const ResultsBusy& e) {
        EXPECT_EQ(e.holders().size(), 2u) << e.what();  // both shards named
    }
    EXPECT_THROW(ResultsLock(d.path, shard(2, 2)), ConfigError);
}

TEST(ResultsLock, UnshardedRunExcludesShards) {
    test::ScratchDir d;
    ResultsLock all(d.path, unsharded());
    EXPECT_THROW(ResultsLock(d.path, shard(0, 3)), ResultsBusy);
}

TEST(ResultsLock, HolderGoneJudgedFromTheLocks) {
    test::ScratchDir d;
    {
        ResultsLock all(d.path, unsharded());
        EXPECT_TRUE(lock_holder_gone(d.path, ".lock-shard-0-of-2", all));  // exclusive: nobody else
    }
    ResultsLock s0(d.path, shard(0, 2));
    EXPECT_TRUE(lock_holder_gone(d.path, ".lock", s0));  // we hold .lock shared: no unsharded run lives
    EXPECT_TRUE(lock_holder_gone(d.path, ".lock-shard-0-of-2", s0));  // our own shard's earlier holder
    EXPECT_TRUE(lock_holder_gone(d.path, ".lock-shard-1-of-2", s0));  // never locked
    {
        ResultsLock s1(d.path, shard(1, 2));
        EXPECT_FALSE(lock_holder_gone(d.path, ".lock-shard-1-of-2", s0));  // alive
    }
    EXPECT_TRUE(lock_holder_gone(d.path, ".lock-shard-1-of-2", s0));  // released: gone
}

TEST(TempFiles, NamesRecordTheirOwner) {
    const std::string t = temp_path_for("/x/runs.jsonl");
    const auto o = temp_file_owner(t);
    ASSERT_TRUE(o) << t;
    EXPECT_EQ(o->host, this_host());
    EXPECT_EQ(o->pid, (long)getpid());
    EXPECT_TRUE(temp_owner_is_me(*o));
    const auto dashed = temp_file_owner("a.json.tmp-node-01.cluster-4242-7");
    ASSERT_TRUE(dashed);
    EXPECT_EQ(dashed->host, "node-01.cluster");
    EXPECT_EQ(dashed->pid, 4242);
    const auto old = temp_file_owner("runs.jsonl.tmp-999-0");  // before host names: this host
    ASSERT_TRUE(old);
    EXPECT_EQ(old->pid, 999);
    EXPECT_EQ(old->host, this_host());
    EXPECT_FALSE(temp_file_owner("runs.jsonl"));
    EXPECT_FALSE(temp_file_owner("a.tmp-x"));
    EXPECT_FALSE(temp_owner_gone({"another-host", dead_pid()}));  // unknown liveness: never gone
    EXPECT_TRUE(temp_owner_gone({this_host(), dead_pid()}));
    EXPECT_FALSE(temp_owner_gone({this_host(), (long)getpid()}));
}

// A shard removes its own and dead writers' temp files, never a live writer's; an exclusive holder
// removes every one (no other writer can exist).
TEST(TempFiles, CleaningRemovesOnlyWhatNoLiveWriterOwns) {
    test::ScratchDir d;
    const std::string parts = d.path + "/parts/r";
    fs::create_directories(parts);
    const std::string host = this_host();
    const std::string dead = parts + "/L0_H0.json.tmp-" + host + "-" + std::to_string(dead_pid()) + "-0";
    const std::string live = parts + "/L0_H1.json.tmp-" + host + "-" + std::to_string(getppid()) + "-0";
    const std::string remote = parts + "/L0_H2.json.tmp-elsewhere-1-0";
    const std::string mine = temp_path_for(parts + "/L0_H3.json");
    for (const auto& f : {dead, live, remote, mine}) std::ofstream(f) << "x";
    {
        ResultsLock s(d.path, shard(0, 2));
        EXPECT_EQ(clean_temp_files(s), 2);
        EXPECT_FALSE(fs::exists(dead));
        EXPECT_FALSE(fs::exists(mine));
        EXPECT_TRUE(fs::exists(live));
        EXPECT_TRUE(fs::exists(remote));
    }
    ResultsLock all(d.path, unsharded());
    EXPECT_EQ(clean_temp_files(all), 2);
    EXPECT_FALSE(fs::exists(live));
    EXPECT_FALSE(fs::exists(remote));
}

TEST(TempFiles, OrphansOfOneFileAreRemovedWhenTheirWriterIsGone) {
    test::ScratchDir d;
    const std::string t = d.path + "/t.h5";
    const std::string dead = t + ".tmp-" + std::to_string(dead_pid());  // the trace writer's old name
    const std::string live = t + ".tmp-" + this_host() + "-" + std::to_string(getppid()) + "-0";
    const std::string other = d.path + "/u.h5.tmp-" + std::to_string(dead_pid());
    for (const auto& f : {dead, live, other}) std::ofstream(f) << "x";
    EXPECT_EQ(remove_orphan_temps_of(t), 1);
    EXPECT_FALSE(fs::exists(dead));
    EXPECT_TRUE(fs::exists(live));
    EXPECT_TRUE(fs::exists(other));  // another file's temp: not ours to judge here
}

// A named part (a closed loop's --only-kind) runs beside other parts and shards, as a shard does, but not
// beside an unsharded run or a second copy of itself; a bad part name is refused.
TEST(ResultsLock, NamedPartsCoexistButExcludeTheirCopiesAndUnshardedRuns) {
    test::ScratchDir d;
    ResultsLockRequest fid = unsharded("fidelity"), niah = unsharded("niah");
    fid.part = "fidelity";
    niah.part = "niah";
    ResultsLock a(d.path, fid);
    EXPECT_FALSE(a.exclusive());
    EXPECT_EQ(a.holder().lock, ".lock-shard-fidelity");
    ResultsLock b(d.path, niah);
    ResultsLockRequest s = shard(1, 3);
    s.part = "niah";
    ResultsLock c(d.path, s);
    EXPECT_EQ(c.holder().lock, ".lock-shard-1-of-3-niah");
    EXPECT_TRUE(is_lock_file_name(c.holder().lock));
    EXPECT_TRUE(is_lock_file_name(".lock-manifest"));  // the closed loop's manifest updates (results.py)
    EXPECT_FALSE(is_lock_file_name("manifest.json"));
    EXPECT_THROW(ResultsLock(d.path, fid), ResultsBusy);
    EXPECT_THROW(ResultsLock(d.path, unsharded()), ResultsBusy);
    ResultsLockRequest bad = unsharded();
    bad.part = "a/b";
    EXPECT_THROW(ResultsLock(d.path + "/x", bad), ConfigError);
}
