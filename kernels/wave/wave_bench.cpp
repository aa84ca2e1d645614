// Microbenchmarks of the wave step's kernels (registry.hpp), groups gather and wave_step: the pinned
// gather (zero-copy and cudaMemcpyAsync), then per context cluster_select's histogram variants, the
// estimation's block widths and the step's four kernels back to back. Inputs are filled with constant
// fp16 patterns (memset) where values do not change the work done: attention, copies and sorting cost
// the same whatever the numbers.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/bench_util.hpp"
#include "common/registry.hpp"
#include "core/half.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

using namespace bench_util;

constexpr int kTokensPerCluster = 16, kSteady = 4 + 64;          // wave defaults: sink 4, window 64
constexpr double kRetrieval = 0.018, kEstimation = 0.232;        // wave defaults (fractions of clusters)
// The share of the retrieval zone's clusters the gather copies from the GPU block cache rather than over
// PCIe: an input of this microbenchmark's gather (the real SmolLM2 queries measured 0.81 at a 5% cache,
// docs/performance.md "Cache locality"), not a basis for any speed-up — the run path measures those.
constexpr double kHitRatio = 0.8;

std::vector<BenchRow> wave_benches(const BenchContext& ctx) {
    const bool want_gather = ctx.want("gather"), want_step = ctx.want("wave_step");
    if (!want_gather && !want_step) return {};
    const DeviceCeilings& c = ctx.ceilings;
    const std::vector<int>& Bs = ctx.batches;
    const int reps = ctx.reps, Bmax = Bs.back();
    std::vector<BenchRow> rows;
    std::mt19937 rng(5);

    // Pinned CPU store shared by the gather benchmarks and the wave step: 1M tokens of K and of V.
    const int64_t cpu_tokens = ctx.options.quick ? (1 << 18) : (1 << 20);
    uint16_t* h_k = static_cast<uint16_t*>(pinned_alloc((size_t)cpu_tokens * kD * 2));
    uint16_t* h_v = static_cast<uint16_t*>(pinned_alloc((size_t)cpu_tokens * kD * 2));
    std::fill_n(h_k, (size_t)cpu_tokens * kD, (uint16_t)0x3C00);
    std::fill_n(h_v, (size_t)cpu_tokens * kD, (uint16_t)0x3800);

    // ---- pinned gather: 16-token clusters from random places of the CPU store ----
    if (want_gather) {
        const int64_t segs_n = cpu_tokens / kTokensPerCluster / 2;
        DeviceBuffer<uint16_t> ek((size_t)segs_n * kTokensPerCluster * kD), ev(ek.size());
        std::vector<CopySegment> segs;
        std::uniform_int_distribution<int64_t> pick(0, cpu_tokens / kTokensPerCluster - 1);
        for (int64_t i = 0; i < segs_n; ++i) {
            const int64_t src = pick(rng) * kTokensPerCluster * kD, dst = i * kTokensPerCluster * kD;
            segs.push_back({h_k + src, h_v + src, ek.get() + dst, ev.get() + dst, kTokensPerCluster});
        }
        auto dsegs = upload(segs);
        const double bytes = 2.0 * segs_n * kTokensPerCluster * kD * 2;
        const std::string p = shape("%ld clusters x %ld tokens, d=%ld, K+V", segs_n, kTokensPerCluster, kD);
        double us = median_us([&] { copy_segments(dsegs.get(), (int)segs.size(), kD, kTokensPerCluster); }, reps);
        rows.push_back(bw_row("gather_zero_copy", p, us, bytes, c.h2d_pinned_bytes_per_s, "pinned H2D"));
        us = median_us([&] { copy_segments_memcpy(segs.data(), (int)segs.size(), kD); }, std::min(reps, 5));
        rows.push_back(bw_row("gather_memcpy_async", p, us, bytes, c.h2d_pinned_bytes_per_s, "pinned H2D"));

        // ---- the device path's gather (issue 40 #2): one gather_clusters with the cache's table, hits from
        // the pool (device memory), misses zero-copy from the pinned store, at three hit ratios (inputs: the
        // run path measures its own) — the miss bytes against pinned H2D, what the offloaded step's
        // "GPU phases + miss bytes at the PCIe rate" bound needs ----
        const int bh = 64, N = (int)(cpu_tokens / bh), M = N / kTokensPerCluster, bt = 8;
        const int r = std::min(M, 128), X = kSteady + r * kTokensPerCluster, nb = M * (kTokensPerCluster / bt);
        std::vector<int32_t> sizes((size_t)bh * M, kTokensPerCluster), offsets(sizes.size()), first(sizes.size()),
            ranked(sizes.size());
        for (int q = 0; q < bh; ++q)
            for (int j = 0; j < M; ++j) {
                const size_t at = (size_t)q * M + j;
                offsets[at] = j * kTokensPerCluster, first[at] = j * (kTokensPerCluster / bt), ranked[at] = j;
            }
        for (int q = 0; q < bh; ++q) std::shuffle(ranked.begin() + (ptrdiff_t)q * M, ranked.begin() + (ptrdiff_t)(q + 1) * M, rng);
        auto dsizes = upload(sizes), doffsets = upload(offsets), dfirst = upload(first), dranked = upload(ranked);
        const int64_t pool_rows = (int64_t)r * kTokensPerCluster;
        DeviceBuffer<uint16_t> pk((size_t)bh * pool_rows * kD), pv(pk.size());
        dev_memset(pk.get(), 0x3c, pk.bytes()), dev_memset(pv.get(), 0x38, pv.bytes());
        DeviceBuffer<uint16_t> xk((size_t)bh * X * kD), xv(xk.size());
        DeviceBuffer<int32_t> lens((size_t)bh), miss((size_t)bh * r);
        GatherShape gs;
        gs.bh = bh, gs.clusters = M, gs.r = r, gs.tokens = N, gs.capacity = X, gs.d = kD;
        const std::string pc = shape("%ld pairs x %ld ranked clusters of %ld tokens of %ld, d=%ld, K+V", bh, r,
                                     kTokensPerCluster, N, kD);
        for (const double hit : {0.0, 0.8, 1.0}) {
            std::vector<int32_t> blocks((size_t)bh * nb, -1);
            const int hits = (int)std::lround(hit * r);
            for (int q = 0; q < bh; ++q)  // the first `hits` ranked clusters resident, in pool order
                for (int i = 0; i < hits; ++i)
                    for (int b = 0; b < kTokensPerCluster / bt; ++b)
                        blocks[(size_t)q * nb + first[(size_t)q * M + ranked[(size_t)q * M + i]] + b] =
                            i * (kTokensPerCluster / bt) + b;
            auto dblocks = upload(blocks);
            GatherCache gc;
            gc.first = dfirst.get(), gc.blocks = dblocks.get(), gc.nb = nb, gc.block_tokens = bt;
            gc.pool_k = pk.get(), gc.pool_v = pv.get(), gc.pool_rows = pool_rows, gc.miss_rows = miss.get();
            const double t = median_us([&] {
                gather_clusters(gs, kSteady, dranked.get(), dsizes.get(), doffsets.get(), h_k, h_v, xk.get(), xv.get(),
                                lens.get(), nullptr, &gc);
            }, reps);
            const double miss_bytes = 2.0 * bh * (r - hits) * kTokensPerCluster * kD * 2;
            const double all_bytes = 2.0 * bh * r * kTokensPerCluster * kD * 2;
            char name[64];
            std::snprintf(name, sizeof(name), "gather_cached_hit%.2f", hit);
            rows.push_back(hits < r ? bw_row(name, pc + " (rate: miss bytes)", t, miss_bytes, c.h2d_pinned_bytes_per_s, "pinned H2D")
                                    : bw_row(name, pc + " (rate: all bytes, from the pool)", t, all_bytes, c.d2d_bytes_per_s, "D2D"));
        }
    }

    for (const int N : ctx.contexts) {
        if (!want_step) break;
        // the step's queries and outputs, as full decode's at this context
        DecodeBenchInputs in = decode_bench_inputs(N, Bmax, rng, false);
        auto &dq = in.q, &out = in.out, &lse = in.lse;

        // ---- wave decode step per layer (RetroInfer §4): rank, estimate, assemble, attend + merge ----
        const int M = N / kTokensPerCluster;
        const int r = (int)std::lround(kRetrieval * M), e = (int)std::lround(kEstimation * M);
        const int cap = kSteady + r * kTokensPerCluster;
        const int nbk_max = Bmax * kHkv;
        DeviceBuffer<uint16_t> cent((size_t)nbk_max * M * kD), vsum(cent.size());
        dev_memset(cent.get(), 0x30, cent.bytes());
        dev_memset(vsum.get(), 0x40, vsum.bytes());
        // cluster_select's radix passes depend on the keys (equal centroids put every key in one bin):
        // random fp16 centroids in [-1, 1) for up to 64 (b, kv head) pairs (batch 8), its benchmark's range
        const int nbk_sel = std::min(nbk_max, 64);
        DeviceBuffer<uint16_t> cent_r((size_t)nbk_sel * M * kD);
        {
            std::vector<uint16_t> h(cent_r.size());
            uint32_t x = 2463534242u;
            for (auto& v : h) {
                x ^= x << 13, x ^= x >> 17, x ^= x << 5;  // xorshift32: a fast fill, not a statistic
                v = float_to_half((float)(x >> 8) / (float)(1u << 23) - 1.0f);
            }
            copy_h2d(cent_r.get(), h.data(), cent_r.bytes());
        }
        auto dsizes = upload(std::vector<int32_t>((size_t)nbk_max * M, kTokensPerCluster));
        std::vector<int32_t> perm((size_t)M);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        std::vector<int32_t> est_ids((size_t)nbk_max * e);
        for (int bk = 0; bk < nbk_max; ++bk) std::copy_n(perm.begin() + r, e, est_ids.begin() + (size_t)bk * e);
        auto dest = upload(est_ids);
        DeviceBuffer<float> agg((size_t)nbk_max * M), eo((size_t)Bmax * kHq * kD), el((size_t)Bmax * kHq);
        DeviceBuffer<int32_t> ranked((size_t)nbk_max * M);
        DeviceBuffer<uint16_t> steady_k((size_t)nbk_max * kSteady * kD), steady_v(steady_k.size());
        const int64_t cache_tokens = std::max<int64_t>(r * kTokensPerCluster, N / 20);  // 5% of the context
        DeviceBuffer<uint16_t> cache_k((size_t)nbk_max * cache_tokens * kD), cache_v(cache_k.size());
        DeviceBuffer<uint16_t> xk((size_t)nbk_max * cap * kD), xv(xk.size());
        dev_memset(steady_k.get(), 0x3C, steady_k.bytes()), dev_memset(steady_v.get(), 0x3C, steady_v.bytes());
        dev_memset(cache_k.get(), 0x3C, cache_k.bytes()), dev_memset(cache_v.get(), 0x3C, cache_v.bytes());
        for (size_t bi = 0; bi < Bs.size(); ++bi) {
            const int B = Bs[bi], nbk = B * kHkv;
            ClusterScoreShape cs{B, kHkv, kG, M, kD, 0.0f};
            DeviceBuffer<char> rw(cluster_rank_workspace(cs));
            // execution-buffer segments: steady zone, then r clusters, hits from the cache, misses from
            // the pinned store (the mapping-table lookup is host work and is not timed here)
            std::vector<CopySegment> segs;
            std::bernoulli_distribution hit(kHitRatio);
            std::uniform_int_distribution<int64_t> cpick(0, cache_tokens / kTokensPerCluster - 1),
                hpick(0, cpu_tokens / kTokensPerCluster - 1);
            int64_t misses = 0;
            for (int bk = 0; bk < nbk; ++bk) {
                uint16_t* dk = xk.get() + (size_t)bk * cap * kD;
                uint16_t* dv = xv.get() + (size_t)bk * cap * kD;
                segs.push_back({steady_k.get() + (size_t)bk * kSteady * kD, steady_v.get() + (size_t)bk * kSteady * kD,
                                dk, dv, kSteady});
                for (int i = 0; i < r; ++i) {
                    const size_t dst = ((size_t)kSteady + (size_t)i * kTokensPerCluster) * kD;
                    if (hit(rng)) {
                        const size_t src = ((size_t)bk * cache_tokens + cpick(rng) * kTokensPerCluster) * kD;
                        segs.push_back({cache_k.get() + src, cache_v.get() + src, dk + dst, dv + dst, kTokensPerCluster});
                    } else {
                        const size_t src = (size_t)hpick(rng) * kTokensPerCluster * kD;
                        segs.push_back({h_k + src, h_v + src, dk + dst, dv + dst, kTokensPerCluster});
                        ++misses;
                    }
                }
            }
            auto dsegs = upload(segs);
            DecodeShape ws;
            ws.batch = B, ws.kv_heads = kHkv, ws.group = kG, ws.d = kD, ws.capacity = cap;
            // enough blocks to fill the GPU at batch 1 (the execution buffer is short): ~4 per SM of 132
            ws.split = std::max(64, std::min(512, (int)((int64_t)cap * nbk / 528) / 64 * 64));
            DeviceBuffer<float> wwork(decode_workspace_floats(ws));
            const auto select = [&] {
                cluster_rank(cs, dq.get(), cent.get(), nullptr, agg.get(), ranked.get(), rw.get(), rw.size());
            };
            DeviceBuffer<float> ework(estimate_workspace_floats(cs, e));
            const auto estimate = [&] {
                estimate_attention(cs, e, dest.get(), dq.get(), cent.get(), vsum.get(), dsizes.get(), eo.get(), el.get(),
                                   ework.get());
            };
            const auto gather = [&] { copy_segments(dsegs.get(), (int)segs.size(), kD, kSteady); };
            const auto attend = [&] {
                decode_attention(ws, dq.get(), xk.get(), xv.get(), nullptr, eo.get(), el.get(), out.get(), lse.get(),
                                 wwork.get());
            };
            const std::string p = shape("B=%ld N=%ld Hq=%ld Hkv=%ld d=%ld", B, N, kHq, kHkv, kD);
            if (nbk <= nbk_sel) {  // the zones as the wave step selects them, every histogram variant
                const SelectHist variant = select_histograms();
                const SelectSplit split_mode = select_split();
                const auto time_zones = [&](const std::string& name) {
                    const double us = median_us(
                        [&] { cluster_select(cs, r, e, dq.get(), cent_r.get(), nullptr, agg.get(), ranked.get(), rw.get(),
                                             rw.size()); },
                        reps);
                    rows.push_back(bw_row(name, p + shape(" r=%ld e=%ld", r, e), us, (double)nbk * M * kD * 2,
                                          c.d2d_bytes_per_s, "D2D copy"));
                };
                set_select_split(SelectSplit::off);
                for (const SelectHist hist : kSelectHists) {
                    set_select_histograms(hist);
                    time_zones(hist == SelectHist::plain ? std::string("cluster_select")
                                                         : std::string("cluster_select_") + select_hist_name(hist));
                }
                set_select_histograms(SelectHist::plain);
                set_select_split(SelectSplit::on);  // the split beside them (sm_90; issue 40 #6)
                time_zones("cluster_select_split");
                set_select_histograms(variant);
                set_select_split(split_mode);
            }
            {  // the estimation's two block widths side by side (the step below uses the process's choice)
                const EstimateWidth variant = estimate_width();
                for (const EstimateWidth w : {EstimateWidth::four, EstimateWidth::wide}) {
                    set_estimate_width(w);
                    const double us = median_us(estimate, reps);
                    rows.push_back(bw_row(std::string("estimate_attention_") + estimate_width_name(w), p, us,
                                          2.0 * nbk * e * kD * 2, c.d2d_bytes_per_s, "D2D copy"));
                }
                set_estimate_width(variant);
            }
            const double t_sel = median_us(select, reps), t_est = median_us(estimate, reps);
            const double t_gat = median_us(gather, reps), t_att = median_us(attend, reps);
            const double t_step = median_us([&] { select(), estimate(), gather(), attend(); }, reps);
            // the four kernels back to back: a kernel timing, not the wave step (no host lookup, no cache
            // admission, a gather whose hit ratio is an input) and no speed-up (issue 41 #1): the run path
            // (retro_gpu_check --wave-only, retro-bench run "backend": "cuda") measures the step
            BenchRow w;
            w.name = "wave_kernels", w.params = p, w.time_us = t_step;
            w.unit = "us";
            w.rate = t_step;
            char buf[600];
            std::snprintf(buf, sizeof buf,
                          "\"select_us\": %.3f, \"estimate_us\": %.3f, \"gather_us\": %.3f, \"attend_us\": %.3f, "
                          "\"clusters\": %d, \"retrieval\": %d, \"estimation\": %d, \"exec_tokens\": %d, "
                          "\"gather_hit_ratio_input\": %.2f, \"pcie_bytes\": %.0f",
                          t_sel, t_est, t_gat, t_att, M, r, e, cap, kHitRatio,
                          (double)misses * kTokensPerCluster * kD * 2 * 2);
            w.extra = buf;
            rows.push_back(w);
            rows.push_back(bw_row("cluster_rank", p, t_sel, (double)nbk * M * kD * 2, c.d2d_bytes_per_s, "D2D copy"));
            rows.push_back(bw_row("estimate_attention", p, t_est, 2.0 * nbk * e * kD * 2, c.d2d_bytes_per_s, "D2D copy"));
            rows.push_back(bw_row("exec_decode", p + shape(" exec=%ld", cap), t_att, 2.0 * nbk * cap * kD * 2,
                                  c.d2d_bytes_per_s, "D2D copy"));
        }
    }
    pinned_free(h_k), pinned_free(h_v);
    return rows;
}

}  // namespace

RETRO_KERNEL_BENCHES(wave, 10, {{"gather, wave_step", wave_benches}});

}  // namespace retro::cuda
