// Microbenchmark of MagicPIG's GPU part (registry.hpp), group magicpig_step: magicpig_hash (every query head's
// L codes of K bits, MagicPIG's default K = 10, L = 150) with its codes read back to pinned host memory (what
// the host's collision test waits for), and decode_attention_pages over the static tokens (4 sink + 64 local,
// page 1), at the model shape on the B x N grid (neither part depends on N: the offloaded tokens are the
// host's; benchmarks/bench_magicpig.cpp times the host part), random hyperplanes and queries. Each row's time
// is its part's alone; the step row times both (the host part not included).
#include <random>
#include <vector>

#include "common/bench_util.hpp"
#include "common/registry.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

using namespace bench_util;

constexpr int kMpK = 10, kMpL = 150, kMpStatic = 4 + 64;

std::vector<BenchRow> magicpig_bench(const BenchContext& ctx) {
    if (!ctx.want("magicpig_step")) return {};
    return for_each_context(ctx, false, [&](int N, DecodeBenchInputs& in, std::vector<BenchRow>& rows) {
        const int Bmax = ctx.batches.back();
        MagicpigShape ms;
        ms.seqs = Bmax * kHkv, ms.heads = kHkv, ms.group = kG, ms.d = kD, ms.K = kMpK, ms.L = kMpL;
        std::mt19937 rng(5);
        const auto planes = upload(check_util::random_float((size_t)kHkv * kD * ms.KL(), rng));
        DeviceBuffer<uint32_t> codes((size_t)ms.queries() * kMpL);
        PinnedBuffer<uint32_t> h_codes((size_t)ms.queries() * kMpL);
        const size_t kv_elems = (size_t)Bmax * kHkv * kMpStatic * kD;
        DeviceBuffer<uint16_t> K(kv_elems), V(kv_elems);
        dev_memset(K.get(), 0x3C, K.bytes());
        dev_memset(V.get(), 0x38, V.bytes());
        std::vector<int32_t> tab((size_t)Bmax * kHkv * kMpStatic);
        for (size_t i = 0; i < tab.size(); ++i) tab[i] = (int32_t)i;  // sequence s's rows s * 68 + r
        const auto table = upload(tab);
        const auto lens = upload(std::vector<int32_t>((size_t)Bmax * kHkv, kMpStatic));
        for (const int B : ctx.batches) {
            ms.seqs = B * kHkv;  // the first B replicas
            DecodeShape ds;
            ds.batch = B, ds.kv_heads = kHkv, ds.group = kG, ds.d = kD, ds.capacity = kMpStatic, ds.split = 64;
            DeviceBuffer<float> work(decode_workspace_floats(ds));
            const size_t code_bytes = (size_t)ms.queries() * kMpL * sizeof(uint32_t);
            const auto hash = [&] {
                magicpig_hash(ms, in.q.get(), planes.get(), codes.get());
                copy_d2h_async(h_codes.get(), codes.get(), code_bytes);
            };
            const auto attend = [&] {
                decode_attention_pages(ds, in.q.get(), K.get(), V.get(), table.get(), 1, kMpStatic, lens.get(),
                                       in.out.get(), in.lse.get(), work.get());
            };
            const std::string p = shape("B=%ld N=%ld Hq=%ld Hkv=%ld d=%ld", B, N, kHq, kHkv, kD) +
                                  shape(" K=%ld L=%ld static=%ld", kMpK, kMpL, kMpStatic);
            // the hyperplanes read once per KV head (the replicas' from cache), the codes written and read back
            const double hash_bytes = (double)kHkv * kD * ms.KL() * 4 + 2.0 * code_bytes;
            const double kv_bytes = (double)B * kHkv * kMpStatic * 2 * kD * 2;
            rows.push_back(bw_row("magicpig_hash", p, median_us(hash, ctx.reps), hash_bytes,
                                  ctx.ceilings.d2d_bytes_per_s, "D2D copy"));
            rows.push_back(bw_row("magicpig_attend", p, median_us(attend, ctx.reps), kv_bytes,
                                  ctx.ceilings.d2d_bytes_per_s, "D2D copy"));
            rows.push_back(bw_row("magicpig_step", p, median_us([&] { hash(), attend(); }, ctx.reps),
                                  hash_bytes + kv_bytes, ctx.ceilings.d2d_bytes_per_s, "D2D copy"));
        }
    });
}

}  // namespace

RETRO_KERNEL_BENCHES(magicpig, 27, {{"magicpig_step", magicpig_bench}});

}  // namespace retro::cuda
