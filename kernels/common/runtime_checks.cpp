// Check of the runtime's launch gate (registry.hpp). Host code only.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/check_util.hpp"
#include "common/registry.hpp"
#include "core/error.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

using namespace check_util;

// The launch gate (LaunchGate, the wave run's timing): the work enqueued behind a held gate runs once it
// is released, and a gate never released ends by its timeout, says so, and leaves the stream running.
void check_launch_gate(Checker& c) {
    Stream s;
    const size_t n = 4096;
    DeviceBuffer<int32_t> dev(n);
    PinnedBuffer<int32_t> src(n);
    std::vector<int32_t> got(n);
    const auto all_are = [&](int32_t v) { return std::all_of(got.begin(), got.end(), [&](int32_t x) { return x == v; }); };
    {
        LaunchGate gate;
        gate.hold(s.get());
        std::fill(src.get(), src.get() + n, 7);
        copy_h2d_async(dev.get(), src.get(), src.bytes(), s.get());
        gate.release();
        s.synchronize();
        copy_d2h(got.data(), dev.get(), dev.bytes());
        c.expect(all_are(7), "the copy enqueued behind a released gate ran");
        c.expect(!gate.timed_out(), "a released gate reports no timeout");
    }
    {
        LaunchGate gate(2000);  // 2 ms
        gate.hold(s.get());
        std::fill(src.get(), src.get() + n, 9);
        copy_h2d_async(dev.get(), src.get(), src.bytes(), s.get());
        s.synchronize();  // never released
        copy_d2h(got.data(), dev.get(), dev.bytes());
        c.expect(all_are(9), "the copy enqueued behind a gate left held ran after its timeout");
        c.expect(gate.timed_out(), "a gate left held reports its timeout");
    }
    {
        LaunchGate never;  // the layers read timed_out() whether or not the step was gated
        never.release();
        c.expect(!never.timed_out(), "a gate never held reports a timeout");
    }
    bool refused = false;
    try {
        LaunchGate bad(0);
    } catch (const ParamError&) {
        refused = true;
    }
    c.expect(refused, "a gate with no timeout is refused");
}

}  // namespace

RETRO_KERNEL_CHECKS(common, 90, {{"LaunchGate", check_launch_gate}});

}  // namespace retro::cuda
