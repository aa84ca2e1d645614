// Children that end with their parent and hold its results lock with it (core/child_process.hpp,
// bench/results_lock.hpp; issue 43 #1-#2): the exit code comes back, the child is told its parent, a
// SIGKILL of the parent ends the child within a second, and a lock inherited by a child stays held after
// the parent lets go, naming the child as the live writer.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "bench/results_lock.hpp"
#include "core/child_process.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"
#include "scratch_dir.hpp"

using namespace retro;

namespace {

bool alive(long pid) { return !process_gone(pid); }

bool gone_within(long pid, std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
        if (!alive(pid)) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return !alive(pid);
}

ResultsLockRequest quick_lock() {
    ResultsLockRequest r;
    r.command = "test";
    r.settle_ms = 0;
    return r;
}

}  // namespace

TEST(ChildProcess, ReturnsTheExitCodeAndTellsTheChildItsParent) {
    test::ScratchDir d;
    const std::string out = d.path + "/env";
    EXPECT_EQ(run_child({"/bin/sh", "-c", "exit 7"}, {}), 7);
    EXPECT_EQ(run_child({"sh", "-c", "echo \"$RETRO_PARENT_PID $MY_VAR\" > " + out}, {.env_set = {{"MY_VAR", "x"}}}), 0);
    EXPECT_EQ(read_file(out), std::to_string(getpid()) + " x\n");
    EXPECT_EQ(run_child({"/bin/sh", "-c", "kill -KILL $$"}, {}), 128 + SIGKILL);
}

TEST(ChildProcess, AProgramThatCannotRunIsNamed) {
    try {
        run_child({"no-such-program-retro"}, {.what = "Test interpreter", .hint = "install it"});
        FAIL() << "expected an error";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("Test interpreter no-such-program-retro"), std::string::npos) << msg;
        EXPECT_NE(msg.find("install it"), std::string::npos) << msg;
    }
    EXPECT_THROW(run_child({"/etc/hostname"}, {}), Error);  // not executable
}

// The parent dies by SIGKILL (nothing can be passed on): the child it was waiting for ends within a second.
TEST(ChildProcess, EndsWithinASecondOfItsParentsSigkill) {
    int pipe_fds[2];
    ASSERT_EQ(pipe(pipe_fds), 0);
    const pid_t parent = fork();
    ASSERT_GE(parent, 0);
    if (parent == 0) {  // the "retro-bench": starts a long child, reports its PID, waits
        close(pipe_fds[0]);
        try {
            run_child({"/bin/sleep", "30"}, {.on_started = [&](long pid) {
                                                 [[maybe_unused]] auto w = write(pipe_fds[1], &pid, sizeof pid);
                                             }});
        } catch (...) {
        }
        _exit(0);
    }
    close(pipe_fds[1]);
    long child = 0;
    ASSERT_EQ(read(pipe_fds[0], &child, sizeof child), (ssize_t)sizeof child);
    close(pipe_fds[0]);
    ASSERT_TRUE(alive(child));
    ASSERT_EQ(kill(parent, SIGKILL), 0);
    waitpid(parent, nullptr, 0);
    EXPECT_TRUE(gone_within(child, std::chrono::milliseconds(1000))) << "child " << child << " outlived its parent";
}

// A child that inherited the lock holds it when its parent lets go; a second run is refused naming the
// child (the live writer); once the child is gone the lock is free.
TEST(ChildProcess, AnInheritedLockIsHeldWhileTheChildLives) {
    test::ScratchDir d;
    const std::string dir = d.path + "/res";
    auto lock = std::make_unique<ResultsLock>(dir, quick_lock());
    std::atomic<long> child{0};
    std::thread waiter([&] {
        run_child({"/bin/sleep", "30"}, {.inherit_fds = lock->fds(), .on_started = [&](long pid) {
                                             lock->add_writer(pid, "sleep 30");
                                             child = pid;
                                         }});
    });
    while (child.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    lock.reset();  // the parent's descriptors closed: only the child's copies hold the flock now
    try {
        ResultsLock second(dir, quick_lock());
        FAIL() << "the child's inherited lock must refuse a second writer";
    } catch (const ResultsBusy& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("with its writer PID " + std::to_string(child.load())), std::string::npos) << msg;
        EXPECT_NE(msg.find("`sleep 30`"), std::string::npos) << msg;
    }
    kill((pid_t)child.load(), SIGKILL);
    waiter.join();
    EXPECT_NO_THROW(ResultsLock(dir, quick_lock()));
}

// die_with_parent_from_env: a child whose named parent is already gone exits at once (137); one whose
// variable names a live process that is not its parent (passed through a shell) carries on.
TEST(ChildProcess, AnOrphanedChildExitsAtStart) {
    const pid_t p = fork();
    ASSERT_GE(p, 0);
    if (p == 0) {
        const pid_t gone = fork();  // a PID certainly not running
        if (gone == 0) _exit(0);
        waitpid(gone, nullptr, 0);
        setenv("RETRO_PARENT_PID", std::to_string(gone).c_str(), 1);
        die_with_parent_from_env();
        _exit(0);  // not reached
    }
    int status = 0;
    waitpid(p, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 137);

    // a parent that died but is not reaped yet (a zombie: kill(pid, 0) still succeeds on it) is gone too
    const pid_t zombie = fork();
    ASSERT_GE(zombie, 0);
    if (zombie == 0) _exit(0);
    while (alive(zombie)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const pid_t z = fork();
    ASSERT_GE(z, 0);
    if (z == 0) {
        setenv("RETRO_PARENT_PID", std::to_string(zombie).c_str(), 1);
        die_with_parent_from_env();
        _exit(0);
    }
    waitpid(z, &status, 0);
    waitpid(zombie, nullptr, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 137);

    const pid_t q = fork();
    ASSERT_GE(q, 0);
    if (q == 0) {
        setenv("RETRO_PARENT_PID", "1", 1);  // init: alive, not our parent (<= 1 is ignored anyway)
        die_with_parent_from_env();
        setenv("RETRO_PARENT_PID", std::to_string(getppid()).c_str(), 1);  // our parent: the death signal is set
        die_with_parent_from_env();
        _exit(5);
    }
    waitpid(q, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 5);
}
