// Microbenchmarks of the CUDA kernels (checks.hpp: run_benches, measure_ceilings). Inputs are filled
// with constant fp16 patterns (memset) where values do not change the work done: attention, copies and
// sorting cost the same whatever the numbers, and a 34 GB random fill would dominate the run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "checks.hpp"
#include "core/half.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

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

std::string shape(const char* f, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0) {
    char buf[200];
    std::snprintf(buf, sizeof buf, f, a, b, c, d, e);
    return buf;
}

BenchRow bw_row(std::string name, std::string params, double us, double bytes, double ceiling, std::string cname) {
    BenchRow r;
    r.name = std::move(name), r.params = std::move(params), r.time_us = us, r.bytes = bytes;
    r.rate = bytes / (us * 1e-6), r.unit = "B/s", r.ceiling = ceiling, r.ceiling_name = std::move(cname);
    r.fraction = ceiling > 0 ? r.rate / ceiling : 0;
    return r;
}

template <class T>
DeviceBuffer<T> upload(const std::vector<T>& v) {
    DeviceBuffer<T> b(v.size());
    if (!v.empty()) copy_h2d(b.get(), v.data(), b.bytes());
    return b;
}

constexpr int kHq = 32, kHkv = 8, kG = kHq / kHkv, kD = 128;  // the model shape
constexpr int kTokensPerCluster = 16, kSteady = 4 + 64;          // wave defaults: sink 4, window 64
constexpr double kRetrieval = 0.018, kEstimation = 0.232;        // wave defaults (fractions of clusters)
// The share of the retrieval zone's clusters the gather copies from the GPU block cache rather than over
// PCIe: an input of this microbenchmark's gather (the real SmolLM2 queries measured 0.81 at a 5% cache,
// docs/performance.md "Cache locality"), not a basis for any speed-up — the run path measures those.
constexpr double kHitRatio = 0.8;

}  // namespace

DeviceCeilings measure_ceilings(bool quick) {
    DeviceCeilings c;
    const size_t n = quick ? (256u << 20) : (1u << 30);
    {
        DeviceBuffer<char> a(n), b(n);
        dev_memset(a.get(), 1, n);
        const double us = median_us([&] { copy_d2d(b.get(), a.get(), n); }, quick ? 5 : 10);
        c.d2d_bytes_per_s = 2.0 * n / (us * 1e-6);  // read + write
    }
    {
        const size_t m = quick ? (128u << 20) : (512u << 20);
        DeviceBuffer<char> d(m);
        void* h = pinned_alloc(m);
        std::fill_n(static_cast<char*>(h), m, 1);
        const double us = median_us([&] { copy_h2d_async(d.get(), h, m); }, quick ? 5 : 10);
        c.h2d_pinned_bytes_per_s = m / (us * 1e-6);
        const double us_back = median_us([&] { copy_d2h_async(h, d.get(), m); }, quick ? 5 : 10);
        c.d2h_pinned_bytes_per_s = m / (us_back * 1e-6);
        pinned_free(h);
    }
    {  // the fixed cost of one small transfer as the host sees it: issue, then wait for completion
        DeviceBuffer<int32_t> d(1);
        PinnedBuffer<int32_t> h(1);
        h[0] = 1;
        std::vector<double> t;
        for (int i = 0; i < 51; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            copy_h2d_async(d.get(), h.get(), sizeof(int32_t));
            synchronize();
            t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(t.begin(), t.end());
        c.transfer_latency_us = t[t.size() / 2];
    }
    c.fp32_flop_per_s = device_fp32_peak();
    c.memory_bytes = (double)device_total_bytes();
    return c;
}

std::vector<BenchRow> run_benches(const BenchOptions& o, const DeviceCeilings& c) {
    std::vector<BenchRow> rows;
    const int reps = o.quick ? 5 : o.reps;
    std::vector<int> Ns = o.quick ? std::vector<int>{32768} : std::vector<int>{32768, 131072};
    std::vector<int> Bs = o.quick ? std::vector<int>{1, 8} : std::vector<int>{1, 8, 16, 32, 64};
    if (!o.contexts.empty()) Ns = o.contexts;
    if (!o.batches.empty()) Bs = o.batches, std::sort(Bs.begin(), Bs.end());
    const auto want = [&](const char* group) { return o.only.empty() || std::string(group).find(o.only) != std::string::npos; };
    const int Bmax = Bs.back();
    std::mt19937 rng(5);

    // Pinned CPU store shared by the gather benchmarks and the wave step: 1M tokens of K and of V.
    const int64_t cpu_tokens = o.quick ? (1 << 18) : (1 << 20);
    uint16_t* h_k = static_cast<uint16_t*>(pinned_alloc((size_t)cpu_tokens * kD * 2));
    uint16_t* h_v = static_cast<uint16_t*>(pinned_alloc((size_t)cpu_tokens * kD * 2));
    std::fill_n(h_k, (size_t)cpu_tokens * kD, (uint16_t)0x3C00);
    std::fill_n(h_v, (size_t)cpu_tokens * kD, (uint16_t)0x3800);

    // ---- pinned gather: 16-token clusters from random places of the CPU store ----
    if (want("gather")) {
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
    }

    for (const int N : Ns) {
        if (!want("full_decode") && !want("wave_step")) break;
        // ---- full-attention decode over all KV in GPU memory ----
        DecodeShape fs;
        fs.kv_heads = kHkv, fs.group = kG, fs.d = kD, fs.capacity = N, fs.split = 512;
        fs.batch = Bmax;
        const size_t kv_elems = (size_t)Bmax * kHkv * N * kD;
        DeviceBuffer<uint16_t> K(kv_elems), V(kv_elems);
        dev_memset(K.get(), 0x3C, K.bytes());
        dev_memset(V.get(), 0x38, V.bytes());
        std::normal_distribution<float> nd;
        std::vector<float> q((size_t)Bmax * kHq * kD);
        for (auto& x : q) x = nd(rng);
        auto dq = upload(q);
        DeviceBuffer<float> out((size_t)Bmax * kHq * kD), lse((size_t)Bmax * kHq), work(decode_workspace_floats(fs));
        for (const int B : Bs) {
            fs.batch = B;
            const double us = median_us(
                [&] { decode_attention(fs, dq.get(), K.get(), V.get(), nullptr, nullptr, nullptr, out.get(), lse.get(),
                                       work.get()); },
                reps);
            rows.push_back(bw_row("full_decode", shape("B=%ld N=%ld Hq=%ld Hkv=%ld d=%ld", B, N, kHq, kHkv, kD), us,
                                  2.0 * B * kHkv * (double)N * kD * 2, c.d2d_bytes_per_s, "D2D copy"));
        }
        // the library baseline on the same KV (FlashInfer's batch decode, planned outside the timing)
        if (want("full_decode") && library_decode_unsupported(kD, kG).empty())
            for (const int B : Bs) {
                fs.batch = B;
                LibraryDecode lib(fs, 16);
                const std::vector<int32_t> lens((size_t)B * kHkv, N);
                lib.plan(lens.data());
                const double us = median_us([&] { lib.run(dq.get(), K.get(), V.get(), out.get(), lse.get()); }, reps);
                rows.push_back(bw_row("full_decode_library",
                                      shape("B=%ld N=%ld Hq=%ld Hkv=%ld d=%ld", B, N, kHq, kHkv, kD), us,
                                      2.0 * B * kHkv * (double)N * kD * 2, c.d2d_bytes_per_s, "D2D copy"));
            }

        // cuDNN's fused attention on the same KV: the harness's graph (stats, lengths as a padding mask)
        // and PyTorch's at inference (no stats, the exact length, no mask), each plan built outside the timing
        if (want("full_decode") && cudnn_decode_unsupported(kD, kG).empty())
            for (const int B : Bs) {
                fs.batch = B;
                auto lens = upload(std::vector<int32_t>((size_t)B, N));
                for (const bool stats : {true, false})
                    for (const bool exact : {false, true}) {
                        CudnnDecodeOptions co;
                        co.stats = stats, co.exact_len = exact ? N : 0;
                        CudnnDecode dnn(fs, co);
                        const double us =
                            median_us([&] { dnn.run(dq.get(), K.get(), V.get(), lens.get(), out.get(), lse.get()); }, reps);
                        rows.push_back(bw_row(std::string("full_decode_cudnn") + (stats ? "" : "_nostats") +
                                                  (exact ? "_exact" : "_padded"),
                                              shape("B=%ld N=%ld Hq=%ld Hkv=%ld d=%ld", B, N, kHq, kHkv, kD), us,
                                              2.0 * B * kHkv * (double)N * kD * 2, c.d2d_bytes_per_s, "D2D copy"));
                    }
            }
        if (!want("wave_step")) continue;

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
                for (const SelectHist hist : kSelectHists) {
                    set_select_histograms(hist);
                    const double us = median_us(
                        [&] { cluster_select(cs, r, e, dq.get(), cent_r.get(), nullptr, agg.get(), ranked.get(), rw.get(),
                                             rw.size()); },
                        reps);
                    rows.push_back(bw_row(hist == SelectHist::plain ? std::string("cluster_select")
                                                                    : std::string("cluster_select_") + select_hist_name(hist),
                                          p + shape(" r=%ld e=%ld", r, e), us, (double)nbk * M * kD * 2,
                                          c.d2d_bytes_per_s, "D2D copy"));
                }
                set_select_histograms(variant);
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

    // ---- k-means (one KV head's 32K prompt keys, the wave index build) ----
    if (want("kmeans")) {
        const int n = o.quick ? 8192 : 32768, d = kD;
        std::normal_distribution<float> nd;
        std::vector<float> x((size_t)n * d);
        for (auto& v : x) v = nd(rng);
        KMeansParams kp;  // defaults: 16 tokens per cluster, segments of 8192 rows, 10 passes
        const KMeansPlan plan = kmeans_plan(n, kp);
        const int S = plan.segments(), ks = plan.k / S;
        auto dx = upload(x);
        auto dc = upload(std::vector<float>(x.begin(), x.begin() + (size_t)plan.k * d));
        auto drb = upload(plan.row_begin), dcb = upload(plan.cluster_begin);
        DeviceBuffer<int32_t> da((size_t)n);
        const double us = median_us(
            [&] { kmeans_assign(dx.get(), n, d, dc.get(), plan.k, drb.get(), dcb.get(), S, 0, da.get()); }, reps);
        BenchRow a;
        a.name = "kmeans_assign", a.params = shape("n=%ld d=%ld k=%ld segments=%ld", n, d, plan.k, S);
        a.time_us = us, a.flops = 2.0 * n * d * ks, a.rate = a.flops / (us * 1e-6), a.unit = "FLOP/s";
        a.ceiling = c.fp32_flop_per_s, a.ceiling_name = "FP32 FMA peak";
        a.fraction = a.ceiling > 0 ? a.rate / a.ceiling : 0;
        rows.push_back(a);
        const auto t0 = std::chrono::steady_clock::now();
        segmented_kmeans_gpu(x.data(), n, d, kp);
        const double wall = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        BenchRow f;
        f.name = "kmeans_segmented_gpu", f.params = a.params + " iters=10 (host wall time incl. copies)";
        f.time_us = wall, f.flops = 2.0 * n * d * ks * (kp.iters - 1) + 2.0 * n * d * plan.k;
        f.rate = f.flops / (wall * 1e-6), f.unit = "FLOP/s", f.ceiling = c.fp32_flop_per_s;
        f.ceiling_name = "FP32 FMA peak", f.fraction = f.ceiling > 0 ? f.rate / f.ceiling : 0;
        rows.push_back(f);
    }
    return rows;
}

}  // namespace retro::cuda
