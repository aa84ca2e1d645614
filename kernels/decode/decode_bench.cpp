// Microbenchmark of flash-decoding (registry.hpp), group full_decode: decode_attention over all KV in
// GPU memory on the B x N grid. Its rows also come with the wave_step group, as the step's full
// attention at the same shapes.
#include <random>
#include <vector>

#include "common/bench_util.hpp"
#include "common/registry.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

using namespace bench_util;

std::vector<BenchRow> full_decode_bench(const BenchContext& ctx) {
    if (!ctx.want("full_decode") && !ctx.want("wave_step")) return {};
    return for_each_context(ctx, true, [&](int N, DecodeBenchInputs& in, std::vector<BenchRow>& rows) {
        // ---- full-attention decode over all KV in GPU memory ----
        DeviceBuffer<float> work(decode_workspace_floats(in.fs));
        for (const int B : ctx.batches) {
            in.fs.batch = B;
            const double us = median_us(
                [&] { decode_attention(in.fs, in.q.get(), in.K.get(), in.V.get(), nullptr, nullptr, nullptr, in.out.get(),
                                       in.lse.get(), work.get()); },
                ctx.reps);
            rows.push_back(full_decode_row("full_decode", B, N, us, ctx.ceilings));
        }
    });
}

}  // namespace

RETRO_KERNEL_BENCHES(decode, 20, {{"full_decode", full_decode_bench}});

}  // namespace retro::cuda
