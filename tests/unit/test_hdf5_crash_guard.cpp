// The CLI's HDF5 crash guard (apps/retro-bench/hdf5_crash_guard.cpp) in a child process (death tests):
// a fatal signal on a thread inside a MetadataReadScope ends with exit 2 naming the file; any other
// fatal signal still reaches the handler that was there before -- ASan's report in the sanitizer build
// (the guard must not hide a real bug from it), the default action's SIGSEGV otherwise.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdint>
#include <thread>

#include "../../apps/retro-bench/hdf5_crash_guard.hpp"
#include "trace/metadata_watch.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define RETRO_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RETRO_TEST_ASAN 1
#endif
#endif

namespace {

/// A real fault (not a raise): a store to an address no process maps.
void fault() {
    volatile std::uintptr_t bad = 8;
    *reinterpret_cast<volatile int*>(bad) = 1;
}

/// How a fatal signal outside a metadata read must end: as if the guard were not there.
bool died_as_without_guard(int status) {
#ifdef RETRO_TEST_ASAN
    return !(WIFEXITED(status) && WEXITSTATUS(status) == 2);  // ASan's exit code / abort, never ours
#else
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
#endif
}
#ifdef RETRO_TEST_ASAN
constexpr const char* kWithoutGuard = "ERROR: AddressSanitizer: SEGV";
#else
constexpr const char* kWithoutGuard = "";
#endif

class Hdf5CrashGuard : public ::testing::Test {
  protected:
    void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

}  // namespace

TEST_F(Hdf5CrashGuard, FaultDuringAMetadataReadEndsWithExit2NamingTheFile) {
    EXPECT_EXIT(
        {
            retro::cli::install_hdf5_crash_guard();
            const retro::MetadataReadScope read("dir/bad trace.h5");
            fault();
        },
        ::testing::ExitedWithCode(2),
        "^retro-bench: error: dir/bad trace\\.h5: HDF5 crashed reading its metadata \\(SIGSEGV; corrupt file\\?\\)\n$");
    // a signal sent to the reading thread counts too, and is named
    EXPECT_EXIT(
        {
            retro::cli::install_hdf5_crash_guard();
            const retro::MetadataReadScope read("t.h5");
            raise(SIGBUS);
        },
        ::testing::ExitedWithCode(2), "t\\.h5: HDF5 crashed reading its metadata \\(SIGBUS; corrupt file\\?\\)");
}

TEST_F(Hdf5CrashGuard, FaultOutsideAMetadataReadIsLeftToThePreviousHandler) {
    EXPECT_EXIT(
        {
            retro::cli::install_hdf5_crash_guard();
            { const retro::MetadataReadScope ended("t.h5"); }
            fault();
        },
        died_as_without_guard, kWithoutGuard);
    EXPECT_EXIT(
        {
            retro::cli::install_hdf5_crash_guard();
            raise(SIGSEGV);
        },
        died_as_without_guard, kWithoutGuard);
}

TEST_F(Hdf5CrashGuard, FaultOnAnotherThreadThanTheReadIsNotBlamedOnTheFile) {
    EXPECT_EXIT(
        {
            retro::cli::install_hdf5_crash_guard();
            const retro::MetadataReadScope read("t.h5");
            std::thread(fault).join();
        },
        died_as_without_guard, kWithoutGuard);
}
