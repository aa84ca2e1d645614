#include "hdf5_crash_guard.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstring>

#include "trace/metadata_watch.hpp"

namespace retro::cli {

namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
constexpr int kCount = sizeof kSignals / sizeof kSignals[0];
struct sigaction g_previous[kCount];  ///< the action each signal had before install (ASan's, or default)

// 64 KiB: room for the sanitizer's reporter too, should it run on this stack (it keeps its own when it
// made one first: install() does not replace an existing alternate stack).
alignas(16) char g_alt_stack[64 * 1024];

const char* signal_name(int sig) {
    switch (sig) {
        case SIGSEGV: return "SIGSEGV";
        case SIGBUS: return "SIGBUS";
        case SIGFPE: return "SIGFPE";
        default: return "SIGILL";
    }
}

/// write(2) all of `s` to stderr (async-signal-safe; a failed write is ignored: there is no one to tell).
void say(const char* s) {
    size_t n = std::strlen(s);
    while (n > 0) {
        const ssize_t w = ::write(STDERR_FILENO, s, n);
        if (w <= 0) return;
        s += w;
        n -= size_t(w);
    }
}

void on_fatal_signal(int sig, siginfo_t* info, void*) {
    if (const char* path = metadata_read_on_this_thread()) {
        // A crash inside HDF5 on this file: its state is unknown, so only async-signal-safe calls from
        // here (no stdio: output still buffered in stdout is lost, as with the hang watchdog's end).
        say("retro-bench: error: ");
        say(path);
        say(": HDF5 crashed reading its metadata (");
        say(signal_name(sig));
        say("; corrupt file?)\n");
        ::_exit(2);
    }
    // Not a metadata read: a bug. Give the signal back to the previous action. A fault re-executes the
    // faulting instruction on return and faults again under it (the sanitizer's report or the default
    // action's core dump then point at the real place); a signal sent by kill/raise is sent again and
    // delivered once this handler returns (the signal is blocked until then).
    for (int i = 0; i < kCount; ++i)
        if (kSignals[i] == sig) ::sigaction(sig, &g_previous[i], nullptr);
    if (info == nullptr || info->si_code <= 0) ::raise(sig);
}

}  // namespace

void install_hdf5_crash_guard() {
    static bool installed = false;
    if (installed) return;
    installed = true;
    stack_t current{};
    if (::sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE)) {
        stack_t alt{};
        alt.ss_sp = g_alt_stack;
        alt.ss_size = sizeof g_alt_stack;
        ::sigaltstack(&alt, nullptr);
    }
    struct sigaction act{};
    act.sa_sigaction = on_fatal_signal;
    act.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&act.sa_mask);
    for (int i = 0; i < kCount; ++i) ::sigaction(kSignals[i], &act, &g_previous[i]);
}

}  // namespace retro::cli
