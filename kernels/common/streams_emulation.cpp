// Part of the CPU emulation of cuda_api.hpp (docs/cuda.md, "CPU emulation"). This file: the streams'
// queues (emulation_streams.hpp) — when enqueued work runs.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/emulation_streams.hpp"
#include "common/emulation_trace.hpp"
#include "core/error.hpp"

namespace retro::cuda::emu {

namespace {

struct Queue;
struct Op {
    unsigned long long seq = 0;
    std::function<void()> work;                               ///< empty: a wait's marker
    std::vector<std::pair<Queue*, unsigned long long>> deps;  ///< run these queues this far first
};
struct Queue {
    std::deque<Op> ops;
    unsigned long long next = 1;  ///< the seq of the next op
};

// One lock for every queue; recursive because work runs under it and may enqueue (at once) or free.
std::recursive_mutex g_mu;
Queue g_default;             // the legacy default stream (nullptr)
std::set<Queue*> g_streams;  // the live created streams
thread_local int t_running = 0;

Queue* queue_of(void* s) { return s ? static_cast<Queue*>(s) : &g_default; }

StreamOrder read_mode() {
    const char* e = std::getenv("RETRO_EMU_STREAMS");
    if (!e || !*e || std::strcmp(e, "lazy") == 0) return StreamOrder::lazy;
    if (std::strcmp(e, "lazy-others-first") == 0) return StreamOrder::others_first;
    if (std::strcmp(e, "eager") == 0) return StreamOrder::eager;
    throw ParamError(std::string("RETRO_EMU_STREAMS: \"") + e +
                     "\" is none of \"lazy\", \"lazy-others-first\" or \"eager\"");
}
std::atomic<int> g_order{-1};  // StreamOrder, read at the first use

void run_queue(Queue* q, unsigned long long upto);

void run_op(Op& op) {
    for (const auto& [dq, seq] : op.deps) run_queue(dq, seq);
    if (!op.work) return;
    ++t_running;
    try {
        op.work();
    } catch (...) {
        --t_running;
        throw;
    }
    --t_running;
}

// Runs q's ops with seq <= upto, oldest first, each after what it waits for.
void run_queue(Queue* q, unsigned long long upto) {
    while (!q->ops.empty() && q->ops.front().seq <= upto) {
        Op op = std::move(q->ops.front());
        q->ops.pop_front();
        run_op(op);
    }
}

// The ops a new one on q must follow besides q's own: the default stream's last op for a created
// stream; every created stream's last op for the default stream.
std::vector<std::pair<Queue*, unsigned long long>> barrier_deps(Queue* q) {
    std::vector<std::pair<Queue*, unsigned long long>> deps;
    if (q != &g_default) {
        if (!g_default.ops.empty()) deps.emplace_back(&g_default, g_default.next - 1);
    } else {
        for (Queue* s : g_streams)
            if (!s->ops.empty()) deps.emplace_back(s, s->next - 1);
    }
    return deps;
}

// Runs every queue but `except` (nullptr: every one) to its end, until none of them holds work (an op may
// wait on a queue already passed).
void run_queues_but(const Queue* except) {
    for (bool more = true; more;) {
        more = false;
        if (except != &g_default) run_queue(&g_default, ~0ull);
        for (Queue* s : std::set<Queue*>(g_streams))
            if (s != except) run_queue(s, ~0ull);
        for (Queue* s : g_streams) more = more || (s != except && !s->ops.empty());
        more = more || (except != &g_default && !g_default.ops.empty());
    }
}

// A synchronization's part (run_stream, run_until): under others_first every other stream's queued work
// first (its waits honoured), so a stream's late write runs before an earlier-queued read it does not wait for.
void others_first(const Queue* q) {
    if (stream_order() == StreamOrder::others_first) run_queues_but(q);
}

void push(Queue* q, std::function<void()> work, std::vector<std::pair<Queue*, unsigned long long>> deps) {
    auto more = barrier_deps(q);
    deps.insert(deps.end(), more.begin(), more.end());
    q->ops.push_back(Op{q->next++, std::move(work), std::move(deps)});
}

}  // namespace

StreamOrder stream_order() {
    int o = g_order.load();
    if (o < 0) {
        o = (int)read_mode();
        g_order.store(o);
    }
    return (StreamOrder)o;
}
void set_stream_order(StreamOrder o) {
    run_all();
    g_order.store((int)o);
}
bool lazy_streams() { return stream_order() != StreamOrder::eager; }

bool running() { return t_running > 0; }

void enqueue(void* stream, std::function<void()> work) {
    if (t_running > 0) {  // an emulated call's own launch: part of that call
        work();
        return;
    }
    check_capture_stream(stream);  // a captured body's launches on its stream alone
    if (!lazy_streams()) {  // at once, as work (its own calls are its own)
        Op op{0, std::move(work), {}};
        run_op(op);
        return;
    }
    const std::lock_guard<std::recursive_mutex> lk(g_mu);
    push(queue_of(stream), std::move(work), {});
}

void run_all() {
    const std::lock_guard<std::recursive_mutex> lk(g_mu);
    run_queues_but(nullptr);
}

void* new_stream() {
    const std::lock_guard<std::recursive_mutex> lk(g_mu);
    Queue* q = new Queue;
    g_streams.insert(q);
    return q;
}

void delete_stream(void* stream) {
    if (!stream) return;
    const std::lock_guard<std::recursive_mutex> lk(g_mu);
    run_all();
    g_streams.erase(static_cast<Queue*>(stream));
    delete static_cast<Queue*>(stream);
}

void run_stream(void* stream) {
    const std::lock_guard<std::recursive_mutex> lk(g_mu);
    others_first(queue_of(stream));
    run_queue(queue_of(stream), ~0ull);
}

EventMark mark(void* stream) {
    const std::lock_guard<std::recursive_mutex> lk(g_mu);
    Queue* q = queue_of(stream);
    return EventMark{q, q->next - 1};
}

void run_until(const EventMark& m) {
    if (!m.queue || m.seq == 0) return;
    const std::lock_guard<std::recursive_mutex> lk(g_mu);
    Queue* q = static_cast<Queue*>(m.queue);
    if (q != &g_default && !g_streams.count(q)) return;  // its stream is gone, and ran all before it went
    others_first(q);
    run_queue(q, m.seq);
}

void wait_for(void* stream, const EventMark& m) {
    if (!lazy_streams() || !m.queue || m.seq == 0) return;
    const std::lock_guard<std::recursive_mutex> lk(g_mu);
    Queue* src = static_cast<Queue*>(m.queue);
    if (src != &g_default && !g_streams.count(src)) return;
    push(queue_of(stream), {}, {{src, m.seq}});
}

}  // namespace retro::cuda::emu
