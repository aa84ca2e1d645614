// Microbenchmark of PQCache's kernels (registry.hpp), group pq_step: pq_scores + pq_select (lookup
// tables, scores, the group's max, the top-k) and decode_attention_pages over the chosen tokens (page 1),
// at the model shape on the B x N grid with the method's defaults (m = 2, nbits = 6: PQCache's LongBench
// setting; k = 1/5 of the tokens, 4 initial + 64 local tokens; one list per KV head, gqa max), random
// codebooks and codes. Each row's time is its kernels' alone; the step row times both together.
#include <random>
#include <vector>

#include "common/bench_util.hpp"
#include "common/registry.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

using namespace bench_util;

constexpr int kPqM = 2, kPqBits = 6, kPqSink = 4, kPqWindow = 64;

std::vector<BenchRow> pq_bench(const BenchContext& ctx) {
    if (!ctx.want("pq_step")) return {};
    return for_each_context(ctx, true, [&](int N, DecodeBenchInputs& in, std::vector<BenchRow>& rows) {
        const int Bmax = ctx.batches.back();
        PqLists l;
        l.n = N, l.sink_end = kPqSink, l.coded_end = N - kPqWindow, l.kv_rows = N;
        if (l.coded() < 1) return;
        l.k = std::min(l.coded(), (int)(0.2 * N + 0.5));
        l.width = l.sink_end + kPqWindow + l.k;
        PqShape ps;
        ps.seqs = Bmax * kHkv, ps.group = kG, ps.d = kD, ps.m = kPqM, ps.nbits = kPqBits, ps.capacity = l.coded();
        std::mt19937 rng(5);
        const auto cb = upload(std::vector<float>(check_util::random_float((size_t)ps.seqs * kD * ps.ksub(), rng)));
        std::vector<uint16_t> codes((size_t)ps.seqs * ps.capacity * kPqM);
        std::uniform_int_distribution<int> cd(0, ps.ksub() - 1);
        for (auto& x : codes) x = (uint16_t)cd(rng);
        const auto dc = upload(codes);
        DeviceBuffer<float> lut((size_t)ps.seqs * kG * kPqM * ps.ksub()), scores((size_t)ps.seqs * kG * ps.capacity);
        DeviceBuffer<int32_t> table((size_t)ps.lists() * l.width), lens((size_t)ps.lists());
        DeviceBuffer<uint8_t> scratch(pq_select_scratch_bytes(ps));
        for (const int B : ctx.batches) {
            ps.seqs = B * kHkv;  // the first B replicas of the inputs
            DecodeShape ds;
            ds.batch = B, ds.kv_heads = kHkv, ds.group = kG, ds.d = kD, ds.capacity = l.width, ds.split = 256;
            DeviceBuffer<float> work(decode_workspace_floats(ds));
            const auto select = [&] {
                pq_scores(ps, in.q.get(), cb.get(), dc.get(), l.coded(), lut.get(), scores.get());
                pq_select(ps, scores.get(), l, table.get(), lens.get(), scratch.get());
            };
            const auto attend = [&] {
                decode_attention_pages(ds, in.q.get(), in.K.get(), in.V.get(), table.get(), 1, l.width, lens.get(),
                                       in.out.get(), in.lse.get(), work.get());
            };
            const std::string p = shape("B=%ld N=%ld Hq=%ld Hkv=%ld d=%ld", B, N, kHq, kHkv, kD) +
                                  shape(" m=%ld nbits=%ld k=%ld", kPqM, kPqBits, l.k);
            // the codes (uint16 here) and the scores written and read back, the sort's keys ignored
            const double sel_bytes = (double)B * kHkv * l.coded() * (kPqM * 2 + kG * 4 * 2);
            const double kv_bytes = (double)B * kHkv * (l.width) * 2 * kD * 2;
            rows.push_back(bw_row("pq_select", p, median_us(select, ctx.reps), sel_bytes, ctx.ceilings.d2d_bytes_per_s,
                                  "D2D copy"));
            rows.push_back(bw_row("pq_attend", p, median_us(attend, ctx.reps), kv_bytes, ctx.ceilings.d2d_bytes_per_s,
                                  "D2D copy"));
            rows.push_back(bw_row("pq_step", p, median_us([&] { select(), attend(); }, ctx.reps), sel_bytes + kv_bytes,
                                  ctx.ceilings.d2d_bytes_per_s, "D2D copy"));
        }
    });
}

}  // namespace

RETRO_KERNEL_BENCHES(pq, 26, {{"pq_step", pq_bench}});

}  // namespace retro::cuda
