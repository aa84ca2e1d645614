// The CPU emulation's streams (kernels/common/emulation_streams.hpp): work queued on a stream runs when a
// synchronization needs it, so the emulated run path's missing synchronizations and waits read stale or
// poisoned memory instead of the right result by luck. Each test is a mistake the emulation must show
// (the host reads before synchronizing, rewrites a copy's source before it ran, a stream reads without
// waiting for another's event, a gate waited on before its release) beside the correct use, which must
// give the right result; and a kernel handed pageable host memory is refused. Linked into
// retro_backend_emulation (RETRO_EMU_STREAMS unset: lazy streams).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/emulation_streams.hpp"
#include "core/error.hpp"
#include "cuda_api.hpp"

using namespace retro;

namespace {

// one int32 on the "device", set and read with the synchronous copies
struct DeviceInt {
    cuda::DeviceBuffer<int32_t> d{1};
    void set(int32_t v) { cuda::copy_h2d(d.get(), &v, sizeof v); }
    int32_t get() const {
        int32_t v = 0;
        cuda::copy_d2h(&v, d.get(), sizeof v);
        return v;
    }
};

// a kernel writing `v` into x on stream st (set_entries: table[0] = v)
struct WriteKernel {
    cuda::DeviceBuffer<int64_t> at{1};
    cuda::DeviceBuffer<int32_t> value{1};
    explicit WriteKernel(int32_t v) {
        const int64_t zero = 0;
        cuda::copy_h2d(at.get(), &zero, sizeof zero);
        cuda::copy_h2d(value.get(), &v, sizeof v);
    }
    void launch(DeviceInt& x, cuda::Stream& st) { cuda::set_entries(at.get(), value.get(), 1, x.d.get(), st.get()); }
};

}  // namespace

TEST(EmulatedStreams, LazyByDefault) { EXPECT_TRUE(cuda::emu::lazy_streams()) << "RETRO_EMU_STREAMS set to eager?"; }

TEST(EmulatedStreams, AReadBackArrivesWhenTheStreamIsSynchronized) {
    DeviceInt x;
    x.set(1);
    cuda::PinnedBuffer<int32_t> h(1);
    h[0] = 0;
    cuda::Stream st;
    cuda::copy_d2h_async(h.get(), x.d.get(), sizeof(int32_t), st.get());
    EXPECT_EQ(h[0], 0) << "read before the stream ran: a GPU would not have copied yet";
    st.synchronize();
    EXPECT_EQ(h[0], 1);
}

TEST(EmulatedStreams, AnAsynchronousCopyReadsItsSourceWhenItRuns) {
    DeviceInt x;
    cuda::PinnedBuffer<int32_t> h(1);
    h[0] = 1;
    cuda::Stream st;
    cuda::copy_h2d_async(x.d.get(), h.get(), sizeof(int32_t), st.get());
    h[0] = 2;  // rewritten before the copy ran: the copy takes what is there when it runs
    st.synchronize();
    EXPECT_EQ(x.get(), 2);
}

TEST(EmulatedStreams, AnEventRecordedAfterTheWorkGivesItsResult) {
    DeviceInt x;
    x.set(0);
    WriteKernel k(5);
    cuda::PinnedBuffer<int32_t> h(1);
    h[0] = -7;
    cuda::Stream st;
    cuda::Event before, after;
    before.record(st.get());
    k.launch(x, st);
    cuda::copy_d2h_async(h.get(), x.d.get(), sizeof(int32_t), st.get());
    after.record(st.get());
    before.synchronize();
    EXPECT_EQ(h[0], -7) << "an earlier event ran later work";
    after.synchronize();
    EXPECT_EQ(h[0], 5);
}

TEST(EmulatedStreams, AStreamSeesAnotherStreamsWriteOnlyAfterWaitingForIt) {
    DeviceInt x;
    x.set(0);
    WriteKernel k(5);
    cuda::PinnedBuffer<int32_t> h(2);
    h[0] = h[1] = -7;
    cuda::Stream writer, reader, waiter;
    k.launch(x, writer);
    cuda::Event written;
    written.record(writer.get());
    cuda::copy_d2h_async(h.get(), x.d.get(), sizeof(int32_t), reader.get());  // no wait: a race
    reader.synchronize();
    EXPECT_EQ(h[0], 0) << "the reader ran the writer's kernel without waiting for it";
    waiter.wait(written);
    cuda::copy_d2h_async(h.get() + 1, x.d.get(), sizeof(int32_t), waiter.get());
    waiter.synchronize();
    EXPECT_EQ(h[1], 5);
}

TEST(EmulatedStreams, TheDefaultStreamIsABarrier) {
    DeviceInt x;
    x.set(1);
    cuda::dev_memset(x.d.get(), 0, sizeof(int32_t));  // legacy default stream: queued, before what follows
    cuda::PinnedBuffer<int32_t> h(1);
    h[0] = -7;
    cuda::Stream st;
    cuda::copy_d2h_async(h.get(), x.d.get(), sizeof(int32_t), st.get());
    st.synchronize();
    EXPECT_EQ(h[0], 0) << "a created stream's work ran before the default stream's earlier memset";
    WriteKernel k(5);
    k.launch(x, st);
    cuda::copy_d2h_async(h.get(), x.d.get(), sizeof(int32_t), nullptr);  // after every stream's earlier work
    cuda::Event e;
    e.record(nullptr);
    e.synchronize();
    EXPECT_EQ(h[0], 5) << "the default stream's copy ran before a created stream's earlier kernel";
}

TEST(EmulatedStreams, SynchronousCopiesAndFreesWaitForEverything) {
    DeviceInt x;
    x.set(0);
    WriteKernel k(5);
    cuda::Stream st;
    k.launch(x, st);
    EXPECT_EQ(x.get(), 5);  // copy_d2h: every stream's earlier work first
    cuda::PinnedBuffer<int32_t> h(1);
    h[0] = -7;
    {
        DeviceInt y;
        y.set(9);
        cuda::copy_d2h_async(h.get(), y.d.get(), sizeof(int32_t), st.get());
    }  // y freed: cudaFree waits for the copy that reads it
    EXPECT_EQ(h[0], 9);
}

TEST(EmulatedStreams, AGateWaitedOnBeforeItsReleaseTimesOut) {
    cuda::Stream st;
    cuda::LaunchGate released, waited;
    released.hold(st.get());
    released.release();
    st.synchronize();
    EXPECT_FALSE(released.timed_out());
    waited.hold(st.get());
    st.synchronize();  // the host waits on the gate it holds: a device's gate ends by its timeout
    waited.release();
    EXPECT_TRUE(waited.timed_out());
}

TEST(EmulatedStreams, NewMemoryHoldsThePoison) {
    cuda::DeviceBuffer<int32_t> d(3);
    cuda::PinnedBuffer<float> p(2);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(d.get()[i], -1);
    for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(p[i] != p[i]) << "not NaN: " << p[i];
}

// A kernel handed host memory that is neither device nor pinned memory (a std::vector's data()) is refused
// at its launch, naming the kernel and the argument; device and pinned (mapped, zero-copy) memory are taken.
TEST(EmulatedStreams, AKernelHandedPageableHostMemoryIsRefused) {
    DeviceInt x;
    x.set(0);
    cuda::Stream st;
    const std::vector<int64_t> at{0};
    const std::vector<int32_t> value{5};
    try {
        cuda::set_entries(at.data(), value.data(), 1, x.d.get(), st.get());
        FAIL() << "a kernel took a std::vector's memory";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("set_entries's argument 1 points into host memory"), std::string::npos)
            << e.what();
    }
    cuda::PinnedBuffer<int64_t> p_at(1);
    cuda::PinnedBuffer<int32_t> p_value(1);
    p_at[0] = 0, p_value[0] = 6;
    cuda::set_entries(p_at.get(), p_value.get(), 1, x.d.get(), st.get());  // zero-copy: pinned memory is visible
    EXPECT_EQ(x.get(), 6);
}

// What a stream capture refuses inside a step graph's body is refused by the emulated StepGraph too, naming
// it (device_status's cudaFree(0) in a launcher's first call was one, found by review): a synchronous copy,
// an allocation, device_status, a launch on another stream; the body's launches on its stream are taken.
TEST(EmulatedStreams, AStepGraphBodyRefusesWhatACaptureRefuses) {
    DeviceInt x;
    x.set(0);
    WriteKernel k(5);
    cuda::Stream st, other;
    const auto refused = [&](const char* what, const std::function<void()>& body) {
        cuda::StepGraph g("test graph");
        try {
            g.run(1, st.get(), body);
            ADD_FAILURE() << what << " taken inside a captured body";
        } catch (const cuda::StepGraphError& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    };
    refused("a synchronous copy", [&] { (void)x.get(); });
    refused("allocation", [&] { cuda::DeviceBuffer<int32_t> scratch(4); });
    refused("device_status", [&] { (void)cuda::device_status(); });
    refused("another stream", [&] { k.launch(x, other); });
    cuda::StepGraph g("test graph");
    g.run(1, st.get(), [&] { k.launch(x, st); });
    g.run(1, st.get(), [&] { k.launch(x, st); });  // a replay: the same launch
    EXPECT_EQ(g.captures(), 1);
    st.synchronize();
    EXPECT_EQ(x.get(), 5);
}

// The two lazy orders are the two extremes a GPU may take when a read on one stream and a write on another
// are not ordered by a wait: lazy runs the write late (the read sees the old value), others-first runs it
// early (the read sees the new one) — a result that differs between them shows the missing wait. With the
// wait (reader waits for the reader's event before the writer writes) both give the old value.
TEST(EmulatedStreams, TheTwoLazyOrdersShowAWriteAfterReadRace) {
    const cuda::emu::StreamOrder was = cuda::emu::stream_order();
    const auto read_then_write = [](bool wait) {
        DeviceInt x;
        x.set(1);
        WriteKernel k(5);
        cuda::PinnedBuffer<int32_t> h(1);
        h[0] = -7;
        cuda::Stream reader, writer;
        cuda::copy_d2h_async(h.get(), x.d.get(), sizeof(int32_t), reader.get());  // queued first
        cuda::Event read;
        read.record(reader.get());
        if (wait) writer.wait(read);
        k.launch(x, writer);  // overwrites what the reader reads
        reader.synchronize();
        const int32_t seen = h[0];
        writer.synchronize();
        return seen;
    };
    cuda::emu::set_stream_order(cuda::emu::StreamOrder::lazy);
    EXPECT_EQ(read_then_write(false), 1);
    EXPECT_EQ(read_then_write(true), 1);
    cuda::emu::set_stream_order(cuda::emu::StreamOrder::others_first);
    EXPECT_EQ(read_then_write(false), 5) << "others-first: the unordered write lands first";
    EXPECT_EQ(read_then_write(true), 1) << "the wait orders it in every schedule";
    cuda::emu::set_stream_order(was);
}
