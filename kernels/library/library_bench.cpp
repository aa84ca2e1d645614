// Microbenchmarks of the library baselines (registry.hpp), group full_decode: FlashInfer's batch decode
// and cuDNN's fused attention (both of its graphs) over the same KV as the own kernel's full_decode rows.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/bench_util.hpp"
#include "common/registry.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

using namespace bench_util;

std::vector<BenchRow> library_benches(const BenchContext& ctx) {
    const bool flashinfer = library_decode_unsupported(kD, kG).empty(), cudnn = cudnn_decode_unsupported(kD, kG).empty();
    if (!ctx.want("full_decode") || (!flashinfer && !cudnn)) return {};
    const DeviceCeilings& c = ctx.ceilings;
    const int reps = ctx.reps;
    return for_each_context(ctx, true, [&](int N, DecodeBenchInputs& in, std::vector<BenchRow>& rows) {
        // the library baseline on the same KV (FlashInfer's batch decode, planned outside the timing)
        if (flashinfer)
            for (const int B : ctx.batches) {
                in.fs.batch = B;
                LibraryDecode lib(in.fs, 16);
                const std::vector<int32_t> lens((size_t)B * kHkv, N);
                lib.plan(lens.data());
                const double us =
                    median_us([&] { lib.run(in.q.get(), in.K.get(), in.V.get(), in.out.get(), in.lse.get()); }, reps);
                rows.push_back(full_decode_row("full_decode_library", B, N, us, c));
            }

        // cuDNN's fused attention on the same KV: the harness's graph (stats, lengths as a padding mask)
        // and PyTorch's at inference (no stats, the exact length, no mask), each plan built outside the timing
        if (cudnn)
            for (const int B : ctx.batches) {
                in.fs.batch = B;
                auto lens = upload(std::vector<int32_t>((size_t)B, N));
                for (const bool stats : {true, false})
                    for (const bool exact : {false, true}) {
                        CudnnDecodeOptions co;
                        co.stats = stats, co.exact_len = exact ? N : 0;
                        CudnnDecode dnn(in.fs, co);
                        const double us = median_us(
                            [&] { dnn.run(in.q.get(), in.K.get(), in.V.get(), lens.get(), in.out.get(), in.lse.get()); },
                            reps);
                        rows.push_back(full_decode_row(std::string("full_decode_cudnn") + (stats ? "" : "_nostats") +
                                                           (exact ? "_exact" : "_padded"),
                                                       B, N, us, c));
                    }
            }
    });
}

}  // namespace

RETRO_KERNEL_BENCHES(library, 30, {{"full_decode (FlashInfer, cuDNN)", library_benches}});

}  // namespace retro::cuda
