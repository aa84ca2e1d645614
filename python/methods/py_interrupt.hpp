#pragma once
// Stopping a Python method in the middle of a call (issue 43 #4). retro-bench stops a run after the heads
// in flight (SIGINT/SIGTERM set its stop flag); a compiled method returns within a step, but a Python
// method can spend minutes in one build or select. So every call into a method is marked (InterruptibleCall,
// with the GIL held) and, once the stop flag is set, a watcher thread raises KeyboardInterrupt in each
// thread inside a call (PyThreadState_SetAsyncExc: Python's own signal handling would reach only the
// main thread, and retro-bench calls methods from its workers). The call then throws retro::Interrupted:
// the head's parts are not written, the run ends "interrupted" and resumes.
// Pure-Python code stops at its next bytecode (well within a second); a long call into C (one huge
// numpy operation, time.sleep) finishes that call first.
#include <atomic>

namespace retro::pym {

/// This thread is inside a Python method call while it lives. Construct and destroy with the GIL held.
class InterruptibleCall {
  public:
    InterruptibleCall();
    ~InterruptibleCall();
    InterruptibleCall(const InterruptibleCall&) = delete;
    InterruptibleCall& operator=(const InterruptibleCall&) = delete;
    /// True once a stop request raised (or is about to raise) KeyboardInterrupt in this call.
    bool interrupted() const;

  private:
    unsigned long thread_;
};

/// Starts (once per process) the watcher thread: when *stop becomes true, every thread inside a Python
/// method call gets KeyboardInterrupt. Does nothing until an interpreter runs.
void interrupt_calls_on(const std::atomic<bool>* stop);

}  // namespace retro::pym
