// Microbenchmark of PQCache's kernels (registry.hpp), group pq_step: pq_scores + pq_select (lookup
// tables, scores, the group's max, the top-k) and decode_attention_pages over the chosen tokens (page 1),
// at the model shape on the B x N grid with the method's defaults (m = 2, nbits = 6: PQCache's LongBench
// setting; k = 1/5 of the tokens, 4 initial + 64 local tokens; one list per KV head, gqa max), random
// codebooks and codes. Each row's time is its kernels' alone; the step row times both together; pq_attend_library
// the same rows by FlashInfer's decode as one-token pages (the layer run's choice in HBM). The
// offloaded rows (pq_gather_hit*) gather the same lists' rows from pinned host memory and a block cache.
#include <algorithm>
#include <random>
#include <vector>

#include "common/bench_util.hpp"
#include "common/registry.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

using namespace bench_util;

constexpr int kPqM = 2, kPqBits = 6, kPqSink = 4, kPqWindow = 64;

/// PQCache offloaded (pq_gather_rows): the rows of pq_select's lists (d_table, d_lens: B * Hkv lists, written by
/// the step's select) into execution buffers, the initial and local ones from device memory, the coded ones
/// from a pinned host store (zero-copy) or, for the units resident in a block cache of 128-token units in
/// 8-row blocks, from its pool: pq_gather_hit0.00 (no cache; rate: the bytes read over PCIe against pinned
/// H2D) and pq_gather_hit0.50 (every other unit resident; rate: every byte gathered against D2D). Left out where
/// the batch's pinned store would pass 2 GiB (a lent machine's pinned memory is shared with the rest).
void gather_rows(const BenchContext& ctx, int B, int N, const PqLists& l, const int32_t* d_table, const int32_t* d_lens,
                 const std::string& p, std::vector<BenchRow>& rows) {
    constexpr int kUnit = 128, kBt = 8;
    const size_t seqs = (size_t)B * kHkv, row = (size_t)kD;
    if (seqs * N * row * 2 * sizeof(uint16_t) > (size_t(2) << 30)) return;
    PinnedBuffer<uint16_t> hk(seqs * N * row), hv(hk.size());
    std::fill(hk.get(), hk.get() + hk.size(), uint16_t{0x3C00});
    std::fill(hv.get(), hv.get() + hv.size(), uint16_t{0x3800});
    const int srows = l.sink_end + (N - l.coded_end);
    DeviceBuffer<uint16_t> sk(seqs * srows * row), sv(sk.size());
    dev_memset(sk.get(), 0x3C, sk.bytes()), dev_memset(sv.get(), 0x38, sv.bytes());
    const int units = (N + kUnit - 1) / kUnit, ub = kUnit / kBt;
    const int64_t pool_rows = (int64_t)(units + 1) / 2 * kUnit;  // every other unit
    DeviceBuffer<uint16_t> pk(seqs * pool_rows * row), pv(pk.size());
    dev_memset(pk.get(), 0x3C, pk.bytes()), dev_memset(pv.get(), 0x38, pv.bytes());
    std::vector<int32_t> blocks(seqs * units * ub, -1);
    for (size_t q = 0; q < seqs; ++q)
        for (int u = 0, next = 0; u < units; u += 2)
            for (int j = 0; j < ub; ++j) blocks[(q * units + u) * ub + j] = next++;
    const auto d_blocks = upload(blocks);
    DeviceBuffer<uint16_t> xk(seqs * l.width * row), xv(xk.size());
    PqRowSources src;
    src.seqs = (int)seqs, src.per = 1, src.d = kD, src.kv_rows = l.kv_rows, src.sink_end = l.sink_end;
    src.coded_end = l.coded_end, src.static_from = l.coded_end, src.static_rows = srows;
    src.static_k = sk.get(), src.static_v = sv.get(), src.store_k = hk.get(), src.store_v = hv.get();
    src.unit_tokens = kUnit, src.block_tokens = kBt;
    const double coded = (double)seqs * l.k * 2 * row * sizeof(uint16_t), all = (double)seqs * l.width * 2 * row * 2;
    for (const bool cached : {false, true}) {
        if (cached) src.blocks = d_blocks.get(), src.pool_k = pk.get(), src.pool_v = pv.get(), src.pool_rows = pool_rows;
        const double us = median_us([&] { pq_gather_rows(src, d_table, d_lens, (int)seqs, l.width, xk.get(), xv.get()); },
                                    ctx.reps);
        rows.push_back(cached ? bw_row("pq_gather_hit0.50", p + " (rate: all bytes gathered)", us, all,
                                       ctx.ceilings.d2d_bytes_per_s, "D2D copy")
                              : bw_row("pq_gather_hit0.00", p + " (rate: the coded rows over PCIe)", us, coded,
                                       ctx.ceilings.h2d_pinned_bytes_per_s, "pinned H2D"));
    }
}

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
            // the same token rows by FlashInfer's decode as one-token pages (the layer run's choice in HBM),
            // side by side with the own kernel
            if (library_decode_unsupported(kD, kG).empty()) {
                LibraryDecode lib(ds, 1);
                lib.plan_device(lens.get(), nullptr, 0, table.get(), l.width);  // sized outside the timing
                const auto attend_lib = [&] {
                    lib.plan_device(lens.get(), nullptr, 0, table.get(), l.width);
                    lib.run(in.q.get(), in.K.get(), in.V.get(), in.out.get(), in.lse.get());
                };
                rows.push_back(bw_row("pq_attend_library", p, median_us(attend_lib, ctx.reps), kv_bytes,
                                      ctx.ceilings.d2d_bytes_per_s, "D2D copy"));
            }
            gather_rows(ctx, B, N, l, table.get(), lens.get(), p, rows);  // the lists of this B's select
        }
    });
}

}  // namespace

RETRO_KERNEL_BENCHES(pq, 26, {{"pq_step", pq_bench}});

}  // namespace retro::cuda
