// Stopping a Python method mid-call (py_interrupt.hpp).
#include "py_interrupt.hpp"

#include <Python.h>

#include <chrono>
#include <map>
#include <thread>

namespace retro::pym {
namespace {

/// Threads inside a method call -> whether KeyboardInterrupt was raised in them. Read and written only
/// with the GIL held (it is the lock).
std::map<unsigned long, bool>& calls_in_flight() {
    static auto* m = new std::map<unsigned long, bool>;  // never destroyed: the watcher may outlive main()
    return *m;
}

/// Raises KeyboardInterrupt in every thread inside a call (takes the GIL).
void interrupt_calls_in_flight() {
    const PyGILState_STATE g = PyGILState_Ensure();
    for (auto& [thread, hit] : calls_in_flight())
        if (!hit) hit = PyThreadState_SetAsyncExc(thread, PyExc_KeyboardInterrupt) > 0;
    PyGILState_Release(g);
}

}  // namespace

InterruptibleCall::InterruptibleCall() : thread_(PyThread_get_thread_ident()) { calls_in_flight()[thread_] = false; }

InterruptibleCall::~InterruptibleCall() {
    auto& m = calls_in_flight();
    // an exception set but not raised yet (the call was returning) must not fire in a later call
    if (m[thread_]) PyThreadState_SetAsyncExc(thread_, nullptr);
    m.erase(thread_);
}

bool InterruptibleCall::interrupted() const { return calls_in_flight()[thread_]; }

void interrupt_calls_on(const std::atomic<bool>* stop) {
    static std::atomic<bool> started{false};
    if (!stop || started.exchange(true)) return;
    // Polls: a signal handler cannot take the GIL, and the flag is all it sets. Every 20 ms while a call
    // is in flight after the stop (a call that starts later is interrupted too); detached, it sleeps until
    // the process ends.
    std::thread([stop] {
        for (;;) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            if (stop->load() && Py_IsInitialized()) interrupt_calls_in_flight();
        }
    }).detach();
}

}  // namespace retro::pym
