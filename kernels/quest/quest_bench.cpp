// Microbenchmark of Quest's kernels (registry.hpp), group quest_step: quest_select (page bounds + top
// pages) and decode_attention_pages over the chosen pages (and the same pages by FlashInfer's decode,
// quest_attend_library: the layer run's choice), at the model shape on the B x N grid with
// Quest's headline budget (2048 tokens in 16-token pages, a list per query head), the page metadata built
// once before. Each row's time is its kernels' alone; the step row times both together.
#include <random>
#include <vector>

#include "common/bench_util.hpp"
#include "common/registry.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

using namespace bench_util;

constexpr int kQuestPage = 16, kQuestBudgetTokens = 2048;

std::vector<BenchRow> quest_bench(const BenchContext& ctx) {
    if (!ctx.want("quest_step")) return {};
    return for_each_context(ctx, true, [&](int N, DecodeBenchInputs& in, std::vector<BenchRow>& rows) {
        const int Bmax = ctx.batches.back(), budget = kQuestBudgetTokens / kQuestPage;
        QuestShape qs;
        qs.seqs = Bmax * kHkv, qs.group = kG, qs.d = kD, qs.page = kQuestPage;
        qs.capacity = N, qs.per_head = true;  // the inputs' rows per sequence
        if (N % kQuestPage != 0) return;      // pages hold whole rows
        const int n = qs.capacity, last = (n + kQuestPage - 1) / kQuestPage - 1;
        DeviceBuffer<uint16_t> meta((size_t)qs.seqs * 2 * kD * qs.max_pages());
        quest_page_meta(qs, in.K.get(), 0, last, meta.get());
        DeviceBuffer<int32_t> table((size_t)qs.lists() * budget), lens((size_t)qs.lists());
        DeviceBuffer<uint8_t> scratch(quest_select_scratch_bytes(qs));
        for (const int B : ctx.batches) {
            qs.seqs = B * kHkv;  // the first B replicas of the inputs
            DecodeShape ds;
            ds.batch = B, ds.kv_heads = kHq, ds.group = 1, ds.d = kD, ds.capacity = budget * kQuestPage, ds.split = 256;
            DeviceBuffer<float> work(decode_workspace_floats(ds));
            const auto select = [&] {
                quest_select(qs, in.q.get(), meta.get(), n, budget, table.get(), lens.get(), scratch.get());
            };
            const auto attend = [&] {
                decode_attention_pages(ds, in.q.get(), in.K.get(), in.V.get(), table.get(), kQuestPage, budget,
                                       lens.get(), in.out.get(), in.lse.get(), work.get());
            };
            const std::string p = shape("B=%ld N=%ld Hq=%ld Hkv=%ld d=%ld", B, N, kHq, kHkv, kD) +
                                  shape(" budget=%ld page=%ld", kQuestBudgetTokens, kQuestPage);
            const double meta_bytes = (double)B * kHq * last * 2 * kD * 2;  // every list reads its pages' min and max
            const double kv_bytes = (double)B * kHq * kQuestBudgetTokens * 2 * kD * 2;
            rows.push_back(bw_row("quest_select", p, median_us(select, ctx.reps), meta_bytes, ctx.ceilings.d2d_bytes_per_s,
                                  "D2D copy"));
            rows.push_back(bw_row("quest_attend", p, median_us(attend, ctx.reps), kv_bytes, ctx.ceilings.d2d_bytes_per_s,
                                  "D2D copy"));
            rows.push_back(bw_row("quest_step", p, median_us([&] { select(), attend(); }, ctx.reps), meta_bytes + kv_bytes,
                                  ctx.ceilings.d2d_bytes_per_s, "D2D copy"));
            // the same pages by FlashInfer's decode (what the layer run uses where it takes the shape), planned
            // on the device from the lengths and the page table as in the run: side by side with the own kernel
            if (library_decode_unsupported(kD, 1).empty()) {
                LibraryDecode lib(ds, kQuestPage);
                select();
                lib.plan_device(lens.get(), nullptr, 0, table.get(), budget);  // its buffers sized outside the timing
                const auto attend_lib = [&] {
                    lib.plan_device(lens.get(), nullptr, 0, table.get(), budget);
                    lib.run(in.q.get(), in.K.get(), in.V.get(), in.out.get(), in.lse.get());
                };
                rows.push_back(bw_row("quest_attend_library", p, median_us(attend_lib, ctx.reps), kv_bytes,
                                      ctx.ceilings.d2d_bytes_per_s, "D2D copy"));
            }
        }
    });
}

}  // namespace

RETRO_KERNEL_BENCHES(quest, 25, {{"quest_step", quest_bench}});

}  // namespace retro::cuda
