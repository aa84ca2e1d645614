// Checks of the wave step's kernels (registry.hpp): cluster_rank and cluster_select against the CPU
// ranking, estimate_attention against add_estimated_cluster, copy_segments (both variants, the admission
// scatter) and gather_clusters against host copies. Host code only: the kernels are reached through
// cuda_api.hpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "attention/cluster_rank.hpp"
#include "common/check_util.hpp"
#include "common/registry.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

using namespace check_util;

// ---------------------------------------------------------------------------------------------------
// cluster_rank vs group_cluster_weights + rank_clusters
// ---------------------------------------------------------------------------------------------------

void check_cluster_rank(Checker& c) {
    struct Case { int B, Hkv, g, M, d; float valid_frac, qsigma; };
    const Case cases[] = {{1, 1, 4, 64, 128, 1.0f, 1.0f}, {2, 2, 4, 1000, 128, 0.9f, 2.0f},
                          {1, 2, 8, 4096, 64, 0.95f, 1.0f}, {3, 1, 1, 333, 256, 0.5f, 3.0f},
                          // each path of the ranking: the block sort at 8 and 16 keys per thread (8188 is
                          // the 128K prompt's cluster count), the global segmented sort past 16K clusters,
                          // the first scores kernel (d = 96) and groups below their register tile (3, 6)
                          {1, 2, 3, 8188, 128, 0.98f, 1.0f}, {2, 1, 6, 12000, 96, 0.9f, 1.0f},
                          {1, 1, 2, 20000, 32, 1.0f, 1.0f}};
    std::mt19937 rng(12345);
    for (const Case& k : cases) {
        ClusterScoreShape s{k.B, k.Hkv, k.g, k.M, k.d, 0.0f};
        const int nbk = k.B * k.Hkv, Hq = k.Hkv * k.g;
        const auto q = random_float((size_t)k.B * Hq * k.d, rng, k.qsigma);
        const Half cent = random_half((size_t)nbk * k.M * k.d, rng);
        std::vector<uint8_t> valid((size_t)nbk * k.M);
        std::bernoulli_distribution bern(k.valid_frac);
        for (auto& v : valid) v = bern(rng) ? 1 : 0;
        for (int bk = 0; bk < nbk; ++bk) valid[(size_t)bk * k.M] = 1;  // at least one valid per segment

        auto dq = upload(q);
        auto dc = upload(cent.bits);
        auto dv = upload(valid);
        DeviceBuffer<float> dagg((size_t)nbk * k.M);
        DeviceBuffer<int32_t> drank((size_t)nbk * k.M);
        DeviceBuffer<char> dwork(cluster_rank_workspace(s));
        poison(dagg), poison(drank);
        cluster_rank(s, dq.get(), dc.get(), dv.get(), dagg.get(), drank.get(), dwork.get(), dwork.size());
        synchronize();
        const auto agg = download(dagg);
        const auto ranked = download(drank);

        const std::string tag = fmt("B=%g Hkv=%g g=%g M=%g d=%g", k.B, k.Hkv, k.g, k.M, k.d);
        std::vector<float> scores((size_t)k.g * k.M), ragg, w, got_v, ref_v;
        for (int bk = 0; bk < nbk; ++bk) {
            const int b = bk / k.Hkv, kvh = bk % k.Hkv;
            for (int h = 0; h < k.g; ++h)
                attention_scores(q.data() + ((size_t)b * Hq + (size_t)kvh * k.g + h) * k.d,
                                 cent.f.data() + (size_t)bk * k.M * k.d, k.M, k.d, scale_of(k.d),
                                 scores.data() + (size_t)h * k.M);
            std::vector<int> vids;
            for (int j = 0; j < k.M; ++j)
                if (valid[(size_t)bk * k.M + j]) vids.push_back(j);
            group_cluster_weights(scores.data(), k.g, k.M, vids, GroupRank::sum, ragg, w);
            const auto order = rank_clusters(ragg, vids);
            for (int j : vids) got_v.push_back(agg[(size_t)bk * k.M + j]), ref_v.push_back(ragg[(size_t)j]);
            // invalid clusters must rank after every valid one
            const int ne = (int)vids.size();
            bool tail_ok = true;
            std::set<int> seen;
            for (int i = 0; i < k.M; ++i) {
                const int id = ranked[(size_t)bk * k.M + i];
                if (id < 0 || id >= k.M || !seen.insert(id).second) tail_ok = false;
                else if ((i < ne) != (valid[(size_t)bk * k.M + id] != 0)) tail_ok = false;
            }
            c.expect(tail_ok, tag + ": ranked ids are a permutation with the valid clusters first");
            // top-(r+e) set: a cluster the GPU picks but the CPU does not must tie (within float error)
            // with the CPU's last pick; near-equal aggregates may swap across the boundary.
            const int top = std::max(1, (int)std::lround(ne * 0.25));
            const std::set<int> ref_top(order.begin(), order.begin() + top);
            const float kth = ragg[(size_t)order[(size_t)top - 1]];
            int swapped = 0, bad = 0;
            for (int i = 0; i < top; ++i) {
                const int id = ranked[(size_t)bk * k.M + i];
                if (id < 0 || id >= k.M || ref_top.count(id)) continue;
                ++swapped;
                if (!(ragg[(size_t)id] >= kth - 1e-5f * (std::fabs(kth) + 1e-6f))) ++bad;
            }
            c.expect(bad == 0, tag + fmt(": %g of the top %g differ from the CPU's beyond ties", bad, top));
            if (swapped) c.note(tag + fmt(": %g boundary ties swapped", swapped));
        }
        c.expect_close(tag + " agg", got_v.data(), ref_v.data(), got_v.size(), kTolAgg);
    }
}

// ---------------------------------------------------------------------------------------------------
// cluster_select vs cluster_rank (the same aggregates: the zones must be exactly the sort's)
// ---------------------------------------------------------------------------------------------------

// ranked[0, r) equal to the full ranking's first r (order included), ranked[r, r + e) the same set as
// its next e; agg bit-identical. Cases: the 128K prompt's 8188 clusters, fewer valid clusters than the
// zones (invalid ones enter the estimation set by id), r = 1024 with r + e = M, r = 0, e = 0, massive
// exact ties (centroids repeated: the lowest ids must win at both thresholds), and M past one block
// (the fallback to cluster_rank).
struct SelectVariant {
    SelectHist hist;
    SelectSplit split;
};
void check_select_variants(Checker& c, const std::vector<SelectVariant>& variants) {
    struct Case { int B, Hkv, g, M, d; float valid_frac; int r, e, distinct; };
    const Case cases[] = {{1, 2, 4, 8188, 128, 0.98f, 147, 1900, 0}, {2, 1, 4, 1000, 128, 0.5f, 30, 600, 0},
                          {1, 1, 8, 4096, 64, 1.0f, 1024, 3072, 0},  {3, 2, 1, 333, 256, 0.9f, 0, 100, 0},
                          {1, 1, 4, 777, 128, 1.0f, 50, 0, 0},       {2, 2, 4, 2048, 128, 1.0f, 100, 700, 37},
                          {1, 1, 3, 5000, 128, 0.95f, 200, 1000, 5}, {1, 1, 4, 12000, 128, 1.0f, 200, 2000, 0}};
    std::mt19937 rng(4242);
    const SelectHist variant = select_histograms();  // the process's choices, restored after
    const SelectSplit split_mode = select_split();
    for (const Case& k : cases) {
        ClusterScoreShape s{k.B, k.Hkv, k.g, k.M, k.d, 0.0f};
        const int nbk = k.B * k.Hkv, Hq = k.Hkv * k.g;
        const auto q = random_float((size_t)k.B * Hq * k.d, rng, 1.0f);
        Half cent = random_half((size_t)nbk * k.M * k.d, rng);
        if (k.distinct > 0)  // centroid j = centroid j mod distinct: exact ties in the aggregates
            for (size_t row = 0; row < (size_t)nbk * k.M; ++row) {
                const size_t src = row / k.M * k.M + row % k.M % k.distinct;
                std::copy_n(cent.bits.begin() + src * k.d, k.d, cent.bits.begin() + row * k.d);
            }
        std::vector<uint8_t> valid((size_t)nbk * k.M);
        std::bernoulli_distribution bern(k.valid_frac);
        for (auto& v : valid) v = bern(rng) ? 1 : 0;
        auto dq = upload(q);
        auto dc = upload(cent.bits);
        auto dv = upload(valid);
        DeviceBuffer<float> agg1((size_t)nbk * k.M), agg2((size_t)nbk * k.M);
        DeviceBuffer<int32_t> rank1((size_t)nbk * k.M), rank2((size_t)nbk * k.M);
        DeviceBuffer<char> dwork(cluster_rank_workspace(s));
        poison(agg1), poison(rank1);
        cluster_rank(s, dq.get(), dc.get(), dv.get(), agg1.get(), rank1.get(), dwork.get(), dwork.size());
        synchronize();
        const auto a1 = download(agg1);
        const auto full = download(rank1);
        for (const SelectVariant& v : variants) {  // every variant against the same ranking
            poison(agg2), poison(rank2);
            set_select_histograms(v.hist);
            set_select_split(v.split);
            cluster_select(s, k.r, k.e, dq.get(), dc.get(), dv.get(), agg2.get(), rank2.get(), dwork.get(), dwork.size());
            synchronize();
            const auto a2 = download(agg2);
            const auto zones = download(rank2);
            const std::string tag = fmt("B=%g Hkv=%g g=%g M=%g", k.B, k.Hkv, k.g, k.M) +
                                    fmt(" r=%g e=%g ties=%g ", k.r, k.e, k.distinct) + select_hist_name(v.hist) +
                                    (v.split == SelectSplit::on ? " split" : "");
            int bad_order = 0, bad_set = 0;
            for (int bk = 0; bk < nbk; ++bk) {
                const int32_t* f = full.data() + (size_t)bk * k.M;
                const int32_t* z = zones.data() + (size_t)bk * k.M;
                for (int i = 0; i < k.r; ++i) bad_order += f[i] != z[i];
                std::set<int32_t> fe(f + k.r, f + k.r + k.e), ze(z + k.r, z + k.r + k.e);
                bad_set += fe != ze || (int)ze.size() != k.e;
            }
            c.expect(bad_order == 0, tag + fmt(": %g retrieval ranks differ from cluster_rank's", bad_order));
            c.expect(bad_set == 0, tag + fmt(": %g estimation sets differ from cluster_rank's", bad_set));
            c.expect(std::memcmp(a1.data(), a2.data(), a1.size() * sizeof(float)) == 0, tag + ": aggregates not identical");
        }
    }
    set_select_histograms(variant);
    set_select_split(split_mode);
}

// every histogram variant, unsplit; and the zones larger than the clusters refused
void check_cluster_select(Checker& c) {
    std::vector<SelectVariant> variants;
    for (const SelectHist hist : kSelectHists) variants.push_back({hist, SelectSplit::off});
    check_select_variants(c, variants);
    bool refused = false;  // zones larger than the clusters
    try {
        ClusterScoreShape s{1, 1, 4, 10, 128, 0.0f};
        cluster_select(s, 6, 5, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
    } catch (const ParamError&) {
        refused = true;
    }
    c.expect(refused, "cluster_select r + e > M not refused");
}

// the split over a cluster of blocks (select_split; a check of its own, so that a lease whose split fails
// still measures with this build: lease-run.sh leaves it out of the fallback and the split out of its rows;
// below sm_90 the split is not taken and this repeats the unsplit kernel)
void check_cluster_select_split(Checker& c) { check_select_variants(c, {{SelectHist::plain, SelectSplit::on}}); }

// ---------------------------------------------------------------------------------------------------
// estimate_attention vs add_estimated_cluster
// ---------------------------------------------------------------------------------------------------

void check_estimate(Checker& c) {
    struct Case { int B, Hkv, g, M, E, d; };
    const Case cases[] = {{1, 1, 4, 256, 0, 128}, {1, 1, 4, 256, 1, 128},   {1, 1, 4, 256, 50, 128},
                          {3, 2, 4, 2048, 500, 128}, {1, 1, 8, 512, 100, 256}, {2, 2, 2, 300, 77, 64},
                          // the 128K prompt's zone (1,900 of 8,188 clusters), a group below its register
                          // tile (6 of 8), and d = 96 (the first kernel: no vector loads)
                          {1, 2, 4, 8188, 1900, 128}, {1, 2, 6, 1000, 300, 128}, {1, 1, 3, 400, 130, 96}};
    std::mt19937 rng(777);
    const EstimateWidth variant = estimate_width();  // the process's choice, restored after
    for (const Case& k : cases) {
        ClusterScoreShape s{k.B, k.Hkv, k.g, k.M, k.d, 0.0f};
        const int nbk = k.B * k.Hkv, Hq = k.Hkv * k.g;
        const auto q = random_float((size_t)k.B * Hq * k.d, rng, 1.5f);
        const Half cent = random_half((size_t)nbk * k.M * k.d, rng);
        std::uniform_int_distribution<int> sz(1, 32);
        std::vector<int32_t> sizes((size_t)nbk * k.M);
        for (auto& x : sizes) x = sz(rng);
        Half vs = random_half((size_t)nbk * k.M * k.d, rng, 4.0f);  // value sums ~ sqrt(size) * N(0, 1)
        std::vector<int32_t> ids((size_t)nbk * k.E);
        for (int bk = 0; bk < nbk; ++bk) {
            std::vector<int32_t> perm((size_t)k.M);
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), rng);
            std::copy(perm.begin(), perm.begin() + k.E, ids.begin() + (size_t)bk * k.E);
        }
        auto dq = upload(q);
        auto dc = upload(cent.bits);
        auto dvs = upload(vs.bits);
        auto dsz = upload(sizes);
        auto dids = upload(ids);
        DeviceBuffer<float> dout((size_t)k.B * Hq * k.d), dlse((size_t)k.B * Hq);
        DeviceBuffer<float> dwork(estimate_workspace_floats(s, k.E));

        std::vector<float> rout((size_t)k.B * Hq * k.d), rlse((size_t)k.B * Hq);
        for (int bk = 0; bk < nbk; ++bk) {
            const int b = bk / k.Hkv, kvh = bk % k.Hkv;
            for (int h = 0; h < k.g; ++h) {
                const size_t qh = (size_t)b * Hq + (size_t)kvh * k.g + h;
                PartialAttention p(k.d);
                for (int t = 0; t < k.E; ++t) {
                    const int cl = ids[(size_t)bk * k.E + t];
                    const float* cc = cent.f.data() + ((size_t)bk * k.M + cl) * k.d;
                    float sc;
                    attention_scores(q.data() + qh * k.d, cc, 1, k.d, scale_of(k.d), &sc);
                    add_estimated_cluster(p, sc, sizes[(size_t)bk * k.M + cl],
                                          vs.f.data() + ((size_t)bk * k.M + cl) * k.d, k.d);
                }
                p.output(rout.data() + qh * k.d);
                rlse[qh] = (float)p.lse();
            }
        }
        for (const bool wide : {false, true}) {  // both block widths against the same reference
            set_estimate_width(wide ? EstimateWidth::wide : EstimateWidth::four);
            poison(dout), poison(dlse), poison(dwork);
            estimate_attention(s, k.E, dids.get(), dq.get(), dc.get(), dvs.get(), dsz.get(), dout.get(), dlse.get(),
                               dwork.get());
            synchronize();
            const auto out = download(dout);
            const auto lse = download(dlse);
            const std::string tag = fmt("B=%g Hkv=%g g=%g E=%g d=%g", k.B, k.Hkv, k.g, k.E, k.d) + (wide ? " wide" : "");
            if (k.E == 0) {
                c.expect(std::all_of(out.begin(), out.end(), [](float x) { return x == 0.0f; }), tag + ": out = 0");
                c.expect(std::all_of(lse.begin(), lse.end(), [](float x) { return std::isinf(x) && x < 0; }),
                         tag + ": lse = -inf");
                continue;
            }
            c.expect_close(tag + " out", out.data(), rout.data(), out.size(), kTolAttention);
            c.expect_close(tag + " lse", lse.data(), rlse.data(), lse.size(), kTolLse);
        }
    }
    set_estimate_width(variant);
}

// ---------------------------------------------------------------------------------------------------
// copy_segments (zero-copy and memcpy variants) and the admission scatter vs host copies
// ---------------------------------------------------------------------------------------------------

// Where a segment reads from, in token rows of the three sources, and where it writes.
struct SegSpec {
    int src;  // 0 steady (device), 1 block cache (device), 2 CPU store (pinned host)
    int64_t src_row, dst_row, tokens;
};

void check_copy_segments(Checker& c) {
    std::mt19937 rng(4242);
    for (const int d : {64, 128}) {
        for (int rep = 0; rep < 2; ++rep) {
            const int64_t n_steady = 68, n_cache = 2000, n_cpu = 5000;
            const size_t tb = (size_t)d;  // halves per token
            const Half steady_k = random_half(n_steady * tb, rng), steady_v = random_half(n_steady * tb, rng);
            const Half cache_k = random_half(n_cache * tb, rng), cache_v = random_half(n_cache * tb, rng);
            const Half cpu_k = random_half(n_cpu * tb, rng), cpu_v = random_half(n_cpu * tb, rng);
            // execution buffer: steady zone, then clusters from the cache or the CPU store, in rank order
            std::vector<SegSpec> specs{{0, 0, 0, n_steady}};
            int64_t row = n_steady;
            std::uniform_int_distribution<int> len(1, 40), src(1, 2);
            for (int i = 0; i < 60; ++i) {
                const int s = src(rng);
                const int64_t L = len(rng);
                const int64_t lim = (s == 1 ? n_cache : n_cpu) - L;
                specs.push_back({s, std::uniform_int_distribution<int64_t>(0, lim)(rng), row, L});
                row += L;
            }
            const int64_t cap = row + 17;  // slack rows past the end must stay poisoned
            int64_t max_tok = 0;
            for (auto& sp : specs) max_tok = std::max(max_tok, sp.tokens);

            auto d_sk = upload(steady_k.bits), d_sv = upload(steady_v.bits);
            auto d_ck = upload(cache_k.bits), d_cv = upload(cache_v.bits);
            PinnedBuffer<uint16_t> pin_k(cpu_k.bits.size()), pin_v(cpu_v.bits.size());  // freed if the check throws
            uint16_t* h_k = pin_k.get();
            uint16_t* h_v = pin_v.get();
            std::memcpy(h_k, cpu_k.bits.data(), cpu_k.bits.size() * 2);
            std::memcpy(h_v, cpu_v.bits.data(), cpu_v.bits.size() * 2);
            DeviceBuffer<uint16_t> ek((size_t)cap * tb), ev((size_t)cap * tb);

            std::vector<CopySegment> segs;
            std::vector<uint16_t> ref_k((size_t)cap * tb, 0xFFFF), ref_v((size_t)cap * tb, 0xFFFF);
            for (const auto& sp : specs) {
                const uint16_t* sk = sp.src == 0 ? d_sk.get() : sp.src == 1 ? d_ck.get() : h_k;
                const uint16_t* sv = sp.src == 0 ? d_sv.get() : sp.src == 1 ? d_cv.get() : h_v;
                segs.push_back({sk + sp.src_row * tb, sv + sp.src_row * tb, ek.get() + sp.dst_row * tb,
                                ev.get() + sp.dst_row * tb, sp.tokens});
                const Half& hk = sp.src == 0 ? steady_k : sp.src == 1 ? cache_k : cpu_k;
                const Half& hv = sp.src == 0 ? steady_v : sp.src == 1 ? cache_v : cpu_v;
                std::copy_n(hk.bits.begin() + sp.src_row * tb, sp.tokens * tb, ref_k.begin() + sp.dst_row * tb);
                std::copy_n(hv.bits.begin() + sp.src_row * tb, sp.tokens * tb, ref_v.begin() + sp.dst_row * tb);
            }
            auto dsegs = upload(segs);
            const std::string tag = fmt("d=%g rep=%g", d, rep);
            for (int variant = 0; variant < 2; ++variant) {
                poison(ek), poison(ev);
                if (variant == 0) copy_segments(dsegs.get(), (int)segs.size(), d, max_tok);
                else copy_segments_memcpy(segs.data(), (int)segs.size(), d);
                synchronize();
                const auto gk = download(ek), gv = download(ev);
                c.expect(gk == ref_k && gv == ref_v,
                         tag + (variant == 0 ? ": zero-copy kernel" : ": cudaMemcpyAsync") +
                             " execution buffer differs from the host copy");
            }
            // admission scatter: the CPU-sourced clusters of the execution buffer go to cache slots
            DeviceBuffer<uint16_t> ck((size_t)n_cache * tb), cv((size_t)n_cache * tb);
            poison(ck), poison(cv);
            std::vector<CopySegment> adm;
            std::vector<uint16_t> rk((size_t)n_cache * tb, 0xFFFF), rv((size_t)n_cache * tb, 0xFFFF);
            int64_t slot = 0;
            for (const auto& sp : specs) {
                if (sp.src != 2 || slot + sp.tokens > n_cache) continue;
                adm.push_back({ek.get() + sp.dst_row * tb, ev.get() + sp.dst_row * tb, ck.get() + slot * tb,
                               cv.get() + slot * tb, sp.tokens});
                std::copy_n(ref_k.begin() + sp.dst_row * tb, sp.tokens * tb, rk.begin() + slot * tb);
                std::copy_n(ref_v.begin() + sp.dst_row * tb, sp.tokens * tb, rv.begin() + slot * tb);
                slot += (sp.tokens + 7) / 8 * 8;  // whole 8-token blocks per cluster, as the system model
            }
            auto dadm = upload(adm);
            copy_segments(dadm.get(), (int)adm.size(), d, max_tok);
            synchronize();
            c.expect(download(ck) == rk && download(cv) == rv, tag + ": admission scatter differs");
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// gather_clusters vs the host's assembly of the same execution buffer
// ---------------------------------------------------------------------------------------------------

/// A cache view's host copies for gather_clusters_ref (GatherCache): first [bh, M], blocks [bh, nb], the pool
/// [bh, pool_rows, d]; miss_rows [bh, r] out.
struct HostCache {
    std::vector<int32_t> first, blocks;
    int nb = 0, bt = 8;
    int64_t pool_rows = 0;
    std::vector<uint16_t> pk, pv;
    std::vector<int32_t> miss_rows;
};

// The reference of gather_clusters: per pair, the first r ranked clusters' rows in rank order after `steady`
// rows, cut at the capacity, from the store or (a cluster resident in `cache`) from its pool blocks; rows it
// does not write keep their previous bits. xk, xv: [bh, X, d].
void gather_clusters_ref(const GatherShape& s, int steady, const std::vector<int32_t>& ranked,
                         const std::vector<int32_t>& sizes, const std::vector<int32_t>& offsets,
                         const std::vector<uint16_t>& sk, const std::vector<uint16_t>& sv, std::vector<uint16_t>& xk,
                         std::vector<uint16_t>& xv, std::vector<int32_t>& lens, HostCache* cache = nullptr) {
    const size_t d = (size_t)s.d;
    lens.assign((size_t)s.bh, 0);
    if (cache) cache->miss_rows.assign((size_t)s.bh * s.r, -1);
    for (int p = 0; p < s.bh; ++p) {
        const size_t at = (size_t)p * s.clusters;
        int64_t row = steady;
        for (int i = 0; i < s.r; ++i) {
            const int cl = ranked[at + i];
            const int32_t* bl = cache ? cache->blocks.data() + (size_t)p * cache->nb + cache->first[at + cl] : nullptr;
            const bool hit = cache && sizes[at + cl] > 0 && bl[0] >= 0;
            if (cache && !hit && sizes[at + cl] > 0 && row < s.capacity) cache->miss_rows[(size_t)p * s.r + i] = (int32_t)row;
            for (int64_t t = 0; t < sizes[at + cl] && row + t < s.capacity; ++t) {
                const size_t dst = ((size_t)p * s.capacity + row + t) * d;
                if (hit) {
                    const size_t src = ((size_t)p * cache->pool_rows + (size_t)bl[t / cache->bt] * cache->bt + t % cache->bt) * d;
                    std::copy_n(cache->pk.begin() + src, d, xk.begin() + dst);
                    std::copy_n(cache->pv.begin() + src, d, xv.begin() + dst);
                } else {
                    const size_t src = ((size_t)p * s.tokens + offsets[at + cl] + t) * d;
                    std::copy_n(sk.begin() + src, d, xk.begin() + dst);
                    std::copy_n(sv.begin() + src, d, xv.begin() + dst);
                }
            }
            row += sizes[at + cl];
        }
        lens[(size_t)p] = (int32_t)std::min<int64_t>(row, s.capacity);
    }
}

void check_gather_clusters(Checker& c) {
    struct Case { int bh, M, r, d, steady, slack; };  // slack < 0: a capacity too small for the r clusters
    // r = 6000 (4000 with the cache): dynamic shared memory just under 48 KB, over it with the kernel's static
    // arrays (a launch that raised the limit only past 48 KB of dynamic memory failed there)
    const Case cases[] = {{1, 40, 0, 64, 5, 3},      {1, 300, 1, 128, 68, 0},   {5, 300, 117, 64, 68, 9},
                          {3, 300, 300, 128, 0, 1},  {2, 1200, 700, 64, 33, 0}, {4, 64, 64, 64, 20, -50},
                          {1, 6000, 6000, 64, 0, 0}, {1, 4100, 4000, 64, 7, 0}};
    std::mt19937 rng(99);
    // every case without the cache, then with it (about half the clusters resident in pool blocks placed in
    // a random order, block size 8 or 5; the store then stands for pinned host memory)
    for (int cached = 0; cached < 2; ++cached)
    for (const Case& k : cases) {
        GatherShape s;
        s.bh = k.bh, s.clusters = k.M, s.r = k.r, s.d = k.d;
        std::vector<int32_t> sizes((size_t)k.bh * k.M), offsets(sizes.size()), ranked(sizes.size());
        std::uniform_int_distribution<int> sz(0, 24);  // empty clusters included
        int64_t need = 0;
        for (int p = 0; p < k.bh; ++p) {
            const size_t at = (size_t)p * k.M;
            std::vector<int> order((size_t)k.M);  // the store holds clusters in a random order
            std::iota(order.begin(), order.end(), 0);
            std::shuffle(order.begin(), order.end(), rng);
            int32_t off = 0;
            for (int j = 0; j < k.M; ++j) sizes[at + j] = sz(rng);
            for (int j : order) offsets[at + j] = off, off += sizes[at + j];
            s.tokens = std::max(s.tokens, (int)off);
            std::iota(ranked.begin() + at, ranked.begin() + at + k.M, 0);
            std::shuffle(ranked.begin() + at, ranked.begin() + at + k.M, rng);
            int64_t sum = 0;
            for (int i = 0; i < k.r; ++i) sum += sizes[at + ranked[at + i]];
            need = std::max(need, sum);
        }
        s.capacity = (int)std::max<int64_t>(k.steady + 1, k.steady + need + k.slack);
        const Half sk = random_half((size_t)k.bh * s.tokens * k.d, rng), sv = random_half(sk.bits.size(), rng);
        auto dsk = upload(sk.bits), dsv = upload(sv.bits);
        auto dranked = upload(ranked), dsizes = upload(sizes), doff = upload(offsets);
        DeviceBuffer<uint16_t> xk((size_t)k.bh * s.capacity * k.d), xv(xk.size());
        DeviceBuffer<int32_t> dlens((size_t)k.bh);
        poison(xk), poison(xv), poison(dlens);
        HostCache hc;
        GatherCache gc;
        DeviceBuffer<int32_t> dfirst, dblocks, dmiss;
        DeviceBuffer<uint16_t> dpk, dpv;
        Half pk, pv;
        if (cached) {
            hc.bt = k.d == 64 ? 8 : 5;
            hc.first.assign(sizes.size(), 0);
            for (int p = 0; p < k.bh; ++p) {  // each cluster's blocks, counted as if every one were resident
                int f = 0;
                for (int j = 0; j < k.M; ++j) hc.first[(size_t)p * k.M + j] = f, f += (sizes[(size_t)p * k.M + j] + hc.bt - 1) / hc.bt;
                hc.nb = std::max(hc.nb, f);
            }
            hc.blocks.assign((size_t)k.bh * std::max(hc.nb, 1), -1);
            std::bernoulli_distribution resident(0.5);
            int64_t pool_blocks = 1;
            std::vector<std::vector<int32_t>> taken((size_t)k.bh);
            for (int p = 0; p < k.bh; ++p)
                for (int j = 0; j < k.M; ++j) {
                    const int nbl = (sizes[(size_t)p * k.M + j] + hc.bt - 1) / hc.bt;
                    if (nbl == 0 || !resident(rng)) continue;
                    for (int b = 0; b < nbl; ++b) taken[(size_t)p].push_back((int32_t)((size_t)p * k.M + j) * 64 + b);
                }
            for (const auto& t : taken) pool_blocks = std::max<int64_t>(pool_blocks, (int64_t)t.size() + 3);
            hc.pool_rows = pool_blocks * hc.bt;
            for (int p = 0; p < k.bh; ++p) {  // the resident blocks placed in a random order of pool blocks
                std::vector<int32_t> place((size_t)pool_blocks);
                std::iota(place.begin(), place.end(), 0);
                std::shuffle(place.begin(), place.end(), rng);
                size_t next = 0;
                for (int32_t code : taken[(size_t)p]) {
                    const int j = (int)((code / 64) % k.M), b = code % 64;
                    hc.blocks[(size_t)p * hc.nb + hc.first[(size_t)p * k.M + j] + b] = place[next++];
                }
            }
            pk = random_half((size_t)k.bh * hc.pool_rows * k.d, rng), pv = random_half(pk.bits.size(), rng);
            hc.pk = pk.bits, hc.pv = pv.bits;
            dfirst = upload(hc.first), dblocks = upload(hc.blocks), dpk = upload(pk.bits), dpv = upload(pv.bits);
            dmiss = DeviceBuffer<int32_t>((size_t)k.bh * std::max(k.r, 1));
            poison(dmiss);
            gc.first = dfirst.get(), gc.blocks = dblocks.get(), gc.nb = hc.nb, gc.block_tokens = hc.bt;
            gc.pool_k = dpk.get(), gc.pool_v = dpv.get(), gc.pool_rows = hc.pool_rows, gc.miss_rows = dmiss.get();
        }
        gather_clusters(s, k.steady, dranked.get(), dsizes.get(), doff.get(), dsk.get(), dsv.get(), xk.get(), xv.get(),
                        dlens.get(), nullptr, cached ? &gc : nullptr);
        synchronize();
        std::vector<uint16_t> rk(xk.size(), 0xFFFF), rv(xv.size(), 0xFFFF);  // poison() writes all ones
        std::vector<int32_t> rlens;
        gather_clusters_ref(s, k.steady, ranked, sizes, offsets, sk.bits, sv.bits, rk, rv, rlens, cached ? &hc : nullptr);
        const std::string tag = fmt("bh=%g M=%g r=%g d=%g steady=%g", k.bh, k.M, k.r, k.d, k.steady) +
                                fmt(" capacity=%g", s.capacity) + (cached ? " cached" : "");
        if (cached && k.r > 0) {
            std::vector<int32_t> got = download(dmiss);
            got.resize((size_t)k.bh * k.r);
            c.expect(got == hc.miss_rows, tag + ": the misses' rows differ from the host's");
        }
        c.expect(download(dlens) == rlens, tag + ": lengths differ from the host's");
        c.expect(download(xk) == rk && download(xv) == rv,
                 tag + ": execution buffers differ from the host's assembly (or rows outside it were written)");
    }
    bool refused = false;  // a shape out of range is refused before any work
    try {
        GatherShape s;
        s.bh = 1, s.clusters = 10, s.r = 11, s.d = 64, s.capacity = 8, s.tokens = 8;
        gather_clusters(s, 0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    } catch (const ParamError&) {
        refused = true;
    }
    c.expect(refused, "gather_clusters with r > clusters: not refused");
}

// set_entries vs the host's loop: scattered entries of a table written, the others left as they were
void check_set_entries(Checker& c) {
    std::mt19937 rng(5);
    for (int n : {0, 1, 255, 256, 1000}) {
        std::vector<int32_t> table(4096);
        std::iota(table.begin(), table.end(), 0);
        std::vector<int64_t> at(table.size());
        std::iota(at.begin(), at.end(), 0);
        std::shuffle(at.begin(), at.end(), rng);
        at.resize((size_t)n);
        std::vector<int32_t> value((size_t)n);
        std::uniform_int_distribution<int32_t> v(-1, 1 << 20);
        for (int32_t& x : value) x = v(rng);
        auto dt = upload(table);
        auto da = upload(at.empty() ? std::vector<int64_t>{0} : at);
        auto dv = upload(value.empty() ? std::vector<int32_t>{0} : value);
        set_entries(da.get(), dv.get(), n, dt.get());
        synchronize();
        for (int i = 0; i < n; ++i) table[(size_t)at[(size_t)i]] = value[(size_t)i];
        c.expect(download(dt) == table, fmt("set_entries n=%g: the table differs from the host's", n));
    }
}

}  // namespace

RETRO_KERNEL_CHECKS(wave, 10, {{"ClusterRank", check_cluster_rank},
                               {"ClusterSelect", check_cluster_select},
                               {"ClusterSelectSplit", check_cluster_select_split},
                               {"EstimateAttention", check_estimate},
                               {"CopySegments", check_copy_segments},
                               {"GatherClusters", check_gather_clusters},
                               {"SetEntries", check_set_entries}});

}  // namespace retro::cuda
