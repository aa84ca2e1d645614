#pragma once
// Helpers of the kernels' microbenchmarks (<family>/<family>_bench.cpp, common/ceilings.cpp): the timing
// rule (median of CUDA-event timings, each call's launches queued behind a launch gate), row builders and
// the model shape the rows are measured at. Host code over runtime_api.hpp.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/check_util.hpp"
#include "common/registry.hpp"
#include "common/runtime_api.hpp"
#include "decode/decode_api.hpp"

namespace retro::cuda::bench_util {

using check_util::upload;

template <class F>
double median_us(F&& f, int reps) {
    f();  // warm-up (first launch, page mapping of pinned memory)
    f();
    synchronize();
    std::vector<double> t;
    EventTimer ev;
    LaunchGate gate;  // each call's launches queued before it runs: its GPU time, not the host's calls
    for (int i = 0; i < reps; ++i) {
        gate.hold(nullptr);
        ev.start();
        f();
        ev.stop();
        gate.release();
        t.push_back(ev.elapsed_ms() * 1e3);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

inline std::string shape(const char* f, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0) {
    char buf[200];
    std::snprintf(buf, sizeof buf, f, a, b, c, d, e);
    return buf;
}

inline BenchRow bw_row(std::string name, std::string params, double us, double bytes, double ceiling, std::string cname) {
    BenchRow r;
    r.name = std::move(name), r.params = std::move(params), r.time_us = us, r.bytes = bytes;
    r.rate = bytes / (us * 1e-6), r.unit = "B/s", r.ceiling = ceiling, r.ceiling_name = std::move(cname);
    r.fraction = ceiling > 0 ? r.rate / ceiling : 0;
    return r;
}

inline constexpr int kHq = 32, kHkv = 8, kG = kHq / kHkv, kD = 128;  // the model shape

/// The full-decode rows' inputs at context N for up to Bmax batch items of the model shape: K and V
/// [Bmax*Hkv, N, d] filled with constant fp16 patterns (with_kv; else empty), the queries [Bmax, Hq, d]
/// drawn from rng, the outputs, and the shape (split 512, batch Bmax).
struct DecodeBenchInputs {
    DecodeShape fs;
    DeviceBuffer<uint16_t> K, V;
    DeviceBuffer<float> q, out, lse;
};
inline DecodeBenchInputs decode_bench_inputs(int N, int Bmax, std::mt19937& rng, bool with_kv = true) {
    DecodeBenchInputs in;
    in.fs.kv_heads = kHkv, in.fs.group = kG, in.fs.d = kD, in.fs.capacity = N, in.fs.split = 512;
    in.fs.batch = Bmax;
    if (with_kv) {
        const size_t kv_elems = (size_t)Bmax * kHkv * N * kD;
        in.K = DeviceBuffer<uint16_t>(kv_elems), in.V = DeviceBuffer<uint16_t>(kv_elems);
        dev_memset(in.K.get(), 0x3C, in.K.bytes());
        dev_memset(in.V.get(), 0x38, in.V.bytes());
    }
    std::normal_distribution<float> nd;
    std::vector<float> q((size_t)Bmax * kHq * kD);
    for (auto& x : q) x = nd(rng);
    in.q = upload(q);
    in.out = DeviceBuffer<float>((size_t)Bmax * kHq * kD), in.lse = DeviceBuffer<float>((size_t)Bmax * kHq);
    return in;
}

/// Runs f(N, inputs, rows) for each context N of ctx's grid on decode_bench_inputs(N, its largest
/// batch, rng, with_kv), the queries of all contexts drawn from one rng seeded 5; returns the rows.
template <class F>
std::vector<BenchRow> for_each_context(const BenchContext& ctx, bool with_kv, F&& f) {
    std::vector<BenchRow> rows;
    std::mt19937 rng(5);
    for (const int N : ctx.contexts) {
        DecodeBenchInputs in = decode_bench_inputs(N, ctx.batches.back(), rng, with_kv);
        f(N, in, rows);
    }
    return rows;
}

/// A full-attention row at batch B and context N: all of K and V read, against the D2D bandwidth.
inline BenchRow full_decode_row(std::string name, int B, int N, double us, const DeviceCeilings& c) {
    return bw_row(std::move(name), shape("B=%ld N=%ld Hq=%ld Hkv=%ld d=%ld", B, N, kHq, kHkv, kD), us,
                  2.0 * B * kHkv * (double)N * kD * 2, c.d2d_bytes_per_s, "D2D copy");
}

}  // namespace retro::cuda::bench_util
