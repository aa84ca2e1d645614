#pragma once
// The CPU emulation's streams (docs/cuda.md, "CPU emulation"): when the work an emulated launch or
// asynchronous copy enqueues actually runs. A GPU runs a stream's work later than the host enqueues it,
// and two streams' work in any order their events allow; code that reads a result before synchronizing,
// rewrites a copy's pinned source before the copy ran, or forgets a Stream::wait is wrong there however
// right it looks when every launch runs at once. So by default (RETRO_EMU_STREAMS=lazy) each stream is a
// queue that runs only when a synchronization needs it — Stream/Event::synchronize, a synchronous copy,
// a free, the device's synchronize — and then only as far as that point and what it waits for (events
// waited on, the legacy default stream's barriers): a missing synchronization then reads what was there
// before, as a GPU would when the host is ahead, instead of the right result by luck.
// That order runs a stream's queued work as late as the program allows; RETRO_EMU_STREAMS=lazy-others-first
// runs every other stream's queued work before the one a synchronization waits for, the other extreme: a
// write on one stream then lands before a read queued earlier on another that does not wait for it (a
// missing wait the other way round). RETRO_EMU_STREAMS=eager runs every launch at once (the emulation before
// 2026-11-30: program order). Emulation only; the CUDA build does not include it.
#include <functional>

namespace retro::cuda::emu {

enum class StreamOrder { eager, lazy, others_first };
/// The order (RETRO_EMU_STREAMS, read at the first use: "lazy" (default), "lazy-others-first" or "eager";
/// another value throws ParamError naming the variable); set_stream_order (tests) runs what is queued first.
StreamOrder stream_order();
void set_stream_order(StreamOrder o);
/// Whether the streams defer their work (lazy or others_first).
bool lazy_streams();

/// Queues `work` on `stream` (nullptr: the legacy default stream, which waits for every other stream's
/// earlier work and which their later work waits for, as cudaStreamCreate's blocking streams do). Runs it
/// at once when the streams are eager, or when called from work already running (a launch made by an
/// emulated call's own body is part of that call). The arguments `work` reads must be captured by value:
/// it may run after the caller's locals are gone, as a kernel's parameters are copied at its launch.
void enqueue(void* stream, std::function<void()> work);

/// Whether the calling thread is running queued work (an emulated call's own body).
bool running();

/// Runs everything queued on every stream (a synchronous copy, cudaDeviceSynchronize, cudaFree).
void run_all();

/// The emulated streams behind runtime_api.hpp's Stream and Event.
void* new_stream();
void delete_stream(void* stream);            ///< runs everything first (what is queued may wait on it)
void run_stream(void* stream);               ///< runs `stream`'s queue and what it waits for
/// An event: the position of the last work queued on `stream` when recorded (nothing: position 0).
struct EventMark {
    void* queue = nullptr;
    unsigned long long seq = 0;
};
EventMark mark(void* stream);
void run_until(const EventMark& m);          ///< runs m's queue up to its position
void wait_for(void* stream, const EventMark& m);  ///< `stream`'s later work waits for m

}  // namespace retro::cuda::emu
