// Check bodies and microbenchmarks of the CUDA kernels (checks.hpp). Host code only: the kernels are
// reached through cuda_api.hpp.
#include "checks.hpp"

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
#include "cluster/kmeans.hpp"
#include "core/half.hpp"
#include "core/error.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

// Tolerances. Inputs are rounded to fp16 once and the CPU reference reads the same rounded values, so
// what is compared is fp32 accumulation (GPU, __expf) against double accumulation (CPU): relative L2
// errors are ~1e-6; the bounds leave room for long sums and fast exp without hiding real bugs (a wrong
// index or a missed token moves the output by far more than 1e-3).
constexpr double kTolAttention = 1e-3;
constexpr double kTolLse = 1e-4;
constexpr double kTolAgg = 1e-4;

std::string fmt(const char* f, double a = 0, double b = 0, double c = 0, double d = 0, double e = 0) {
    char buf[256];
    std::snprintf(buf, sizeof buf, f, a, b, c, d, e);
    return buf;
}

// fp16 bits [n] and their float values [n] (the reference reads the floats).
struct Half {
    std::vector<uint16_t> bits;
    std::vector<float> f;
};
Half random_half(size_t n, std::mt19937& rng, float sigma = 1.0f) {
    std::normal_distribution<float> nd(0.0f, sigma);
    Half h;
    h.bits.resize(n);
    h.f.resize(n);
    for (size_t i = 0; i < n; ++i) {
        h.bits[i] = float_to_half(nd(rng));
        h.f[i] = half_to_float(h.bits[i]);
    }
    return h;
}
std::vector<float> random_float(size_t n, std::mt19937& rng, float sigma = 1.0f) {
    std::normal_distribution<float> nd(0.0f, sigma);
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng);
    return v;
}

template <class T>
DeviceBuffer<T> upload(const std::vector<T>& v) {
    DeviceBuffer<T> b(v.size());
    if (!v.empty()) copy_h2d(b.get(), v.data(), b.bytes());
    return b;
}
template <class T>
std::vector<T> download(const DeviceBuffer<T>& b) {
    std::vector<T> v(b.size());
    if (!v.empty()) copy_d2h(v.data(), b.get(), b.bytes());
    return v;
}
template <class T>
void poison(DeviceBuffer<T>& b) {
    dev_memset(b.get(), kPoisonByte, b.bytes());
}

float scale_of(int d) { return 1.0f / std::sqrt((float)d); }

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
void check_cluster_select(Checker& c) {
    struct Case { int B, Hkv, g, M, d; float valid_frac; int r, e, distinct; };
    const Case cases[] = {{1, 2, 4, 8188, 128, 0.98f, 147, 1900, 0}, {2, 1, 4, 1000, 128, 0.5f, 30, 600, 0},
                          {1, 1, 8, 4096, 64, 1.0f, 1024, 3072, 0},  {3, 2, 1, 333, 256, 0.9f, 0, 100, 0},
                          {1, 1, 4, 777, 128, 1.0f, 50, 0, 0},       {2, 2, 4, 2048, 128, 1.0f, 100, 700, 37},
                          {1, 1, 3, 5000, 128, 0.95f, 200, 1000, 5}, {1, 1, 4, 12000, 128, 1.0f, 200, 2000, 0}};
    std::mt19937 rng(4242);
    const SelectHist variant = select_histograms();  // the process's choice, restored after
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
        for (const SelectHist hist : kSelectHists) {  // every histogram variant against the same ranking
            poison(agg2), poison(rank2);
            set_select_histograms(hist);
            cluster_select(s, k.r, k.e, dq.get(), dc.get(), dv.get(), agg2.get(), rank2.get(), dwork.get(), dwork.size());
            synchronize();
            const auto a2 = download(agg2);
            const auto zones = download(rank2);
            const std::string tag = fmt("B=%g Hkv=%g g=%g M=%g", k.B, k.Hkv, k.g, k.M) +
                                    fmt(" r=%g e=%g ties=%g ", k.r, k.e, k.distinct) + select_hist_name(hist);
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
    bool refused = false;  // zones larger than the clusters
    try {
        ClusterScoreShape s{1, 1, 4, 10, 128, 0.0f};
        cluster_select(s, 6, 5, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
    } catch (const ParamError&) {
        refused = true;
    }
    c.expect(refused, "cluster_select r + e > M not refused");
}

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
            uint16_t* h_k = static_cast<uint16_t*>(pinned_alloc(cpu_k.bits.size() * 2));
            uint16_t* h_v = static_cast<uint16_t*>(pinned_alloc(cpu_v.bits.size() * 2));
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
            pinned_free(h_k), pinned_free(h_v);
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// gather_clusters vs the host's assembly of the same execution buffer
// ---------------------------------------------------------------------------------------------------

// The reference of gather_clusters: per pair, the first r ranked clusters' store rows in rank order after
// `steady` rows, cut at the capacity; rows it does not write keep their previous bits. xk, xv: [bh, X, d].
void gather_clusters_ref(const GatherShape& s, int steady, const std::vector<int32_t>& ranked,
                         const std::vector<int32_t>& sizes, const std::vector<int32_t>& offsets,
                         const std::vector<uint16_t>& sk, const std::vector<uint16_t>& sv, std::vector<uint16_t>& xk,
                         std::vector<uint16_t>& xv, std::vector<int32_t>& lens) {
    const size_t d = (size_t)s.d;
    lens.assign((size_t)s.bh, 0);
    for (int p = 0; p < s.bh; ++p) {
        const size_t at = (size_t)p * s.clusters;
        int64_t row = steady;
        for (int i = 0; i < s.r; ++i) {
            const int cl = ranked[at + i];
            for (int64_t t = 0; t < sizes[at + cl] && row + t < s.capacity; ++t) {
                const size_t src = ((size_t)p * s.tokens + offsets[at + cl] + t) * d;
                const size_t dst = ((size_t)p * s.capacity + row + t) * d;
                std::copy_n(sk.begin() + src, d, xk.begin() + dst);
                std::copy_n(sv.begin() + src, d, xv.begin() + dst);
            }
            row += sizes[at + cl];
        }
        lens[(size_t)p] = (int32_t)std::min<int64_t>(row, s.capacity);
    }
}

void check_gather_clusters(Checker& c) {
    struct Case { int bh, M, r, d, steady, slack; };  // slack < 0: a capacity too small for the r clusters
    const Case cases[] = {{1, 40, 0, 64, 5, 3},      {1, 300, 1, 128, 68, 0},   {5, 300, 117, 64, 68, 9},
                          {3, 300, 300, 128, 0, 1},  {2, 1200, 700, 64, 33, 0}, {4, 64, 64, 64, 20, -50}};
    std::mt19937 rng(99);
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
        gather_clusters(s, k.steady, dranked.get(), dsizes.get(), doff.get(), dsk.get(), dsv.get(), xk.get(), xv.get(),
                        dlens.get());
        synchronize();
        std::vector<uint16_t> rk(xk.size(), 0xFFFF), rv(xv.size(), 0xFFFF);  // poison() writes all ones
        std::vector<int32_t> rlens;
        gather_clusters_ref(s, k.steady, ranked, sizes, offsets, sk.bits, sv.bits, rk, rv, rlens);
        const std::string tag = fmt("bh=%g M=%g r=%g d=%g steady=%g", k.bh, k.M, k.r, k.d, k.steady) +
                                fmt(" capacity=%g", s.capacity);
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

// ---------------------------------------------------------------------------------------------------
// decode_attention vs partial_attention_ids + merge
// ---------------------------------------------------------------------------------------------------

// The reference of decode_attention and LibraryDecode: per (b, kv head) and query head, attention over the
// first lens[bk] tokens of K, V: [B*Hkv, cap, d] (partial_attention_ids), merged with the extra (out, lse)
// partial when xo/xl are given (as m = lse, l = 1, acc = out). rout: [B, Hkv*g, d], rlse: [B, Hkv*g].
void reference_decode(const std::vector<float>& q, const Half& K, const Half& V, const std::vector<int32_t>& lens,
                      int B, int Hkv, int g, int cap, int d, const std::vector<float>* xo,
                      const std::vector<float>* xl, std::vector<float>& rout, std::vector<float>& rlse) {
    const int Hq = Hkv * g;
    rout.assign((size_t)B * Hq * d, 0.0f), rlse.assign((size_t)B * Hq, 0.0f);
    for (int bk = 0; bk < B * Hkv; ++bk) {
        const int b = bk / Hkv, kvh = bk % Hkv;
        std::vector<int32_t> ids((size_t)lens[(size_t)bk]);
        std::iota(ids.begin(), ids.end(), 0);
        for (int h = 0; h < g; ++h) {
            const size_t qh = (size_t)b * Hq + (size_t)kvh * g + h;
            PartialAttention p = partial_attention_ids(q.data() + qh * d, K.f.data() + (size_t)bk * cap * d,
                                                       V.f.data() + (size_t)bk * cap * d, ids, d, scale_of(d));
            if (xl && std::isfinite((*xl)[qh])) {
                PartialAttention e(d);
                e.m = (*xl)[qh], e.l = 1.0;
                for (int j = 0; j < d; ++j) e.acc[(size_t)j] = (*xo)[qh * d + j];
                merge(p, e);
            }
            p.output(rout.data() + qh * d);
            rlse[qh] = (float)p.lse();
        }
    }
}

// One decode check case's shape and random inputs, drawn in this order from rng: q [B, Hkv*g, d] f32
// (normal, sigma qsigma), then K and V [B*Hkv, cap, d] fp16; the tag names the shape in the reports.
// Shared by the checks of decode_attention, LibraryDecode and CudnnDecode.
struct DecodeInputs {
    DecodeShape s;
    int nbk = 0, Hq = 0;  // B*Hkv requests, Hkv*g query heads
    std::vector<float> q;
    Half K, V;
    std::string tag;
};
DecodeInputs decode_inputs(int B, int Hkv, int g, int cap, int d, float qsigma, std::mt19937& rng) {
    DecodeInputs x;
    x.s.batch = B, x.s.kv_heads = Hkv, x.s.group = g, x.s.d = d, x.s.capacity = cap;
    x.nbk = B * Hkv, x.Hq = Hkv * g;
    x.q = random_float((size_t)B * x.Hq * d, rng, qsigma);
    x.K = random_half((size_t)x.nbk * cap * d, rng);
    x.V = random_half((size_t)x.nbk * cap * d, rng);
    x.tag = fmt("B=%g Hkv=%g g=%g cap=%g d=%g", B, Hkv, g, cap, d);
    return x;
}

void check_decode(Checker& c) {
    struct Case { int B, Hkv, g, cap, split, d; bool lens, extra; float qsigma; };
    const Case cases[] = {{1, 1, 1, 1, 512, 128, false, false, 1.0f},    {2, 2, 4, 1000, 128, 128, true, false, 2.0f},
                          {1, 2, 8, 5000, 512, 64, false, true, 1.0f},   {1, 1, 4, 3000, 256, 256, true, true, 3.0f},
                          {3, 1, 4, 700, 100, 128, true, true, 1.0f},    {1, 8, 4, 9000, 512, 128, false, false, 1.0f}};
    std::mt19937 rng(99);
    for (const Case& k : cases) {
        DecodeInputs x = decode_inputs(k.B, k.Hkv, k.g, k.cap, k.d, k.qsigma, rng);
        DecodeShape& s = x.s;
        s.split = k.split;
        const int nbk = x.nbk, Hq = x.Hq;
        const auto& q = x.q;
        const Half &K = x.K, &V = x.V;
        std::vector<int32_t> lens((size_t)nbk, k.cap);
        if (k.lens) {
            std::uniform_int_distribution<int> ld(0, k.cap);
            for (auto& l : lens) l = ld(rng);
            lens[0] = 0;  // an empty execution buffer: only the extra partial (or nothing) remains
        }
        std::vector<float> xo, xl;
        if (k.extra) {
            xo = random_float((size_t)k.B * Hq * k.d, rng);
            xl = random_float((size_t)k.B * Hq, rng, 2.0f);
            xl[1 % xl.size()] = -INFINITY;  // an empty estimation partial
        }
        auto dq = upload(q);
        auto dk = upload(K.bits), dv = upload(V.bits);
        auto dl = upload(lens);
        auto dxo = upload(xo), dxl = upload(xl);
        DeviceBuffer<float> dout((size_t)k.B * Hq * k.d), dlse((size_t)k.B * Hq), dw(decode_workspace_floats(s));
        poison(dout), poison(dlse), poison(dw);
        decode_attention(s, dq.get(), dk.get(), dv.get(), k.lens ? dl.get() : nullptr, k.extra ? dxo.get() : nullptr,
                         k.extra ? dxl.get() : nullptr, dout.get(), dlse.get(), dw.get());
        synchronize();
        const auto out = download(dout), lse = download(dlse);

        std::vector<float> rout, rlse;
        reference_decode(q, K, V, lens, k.B, k.Hkv, k.g, k.cap, k.d, k.extra ? &xo : nullptr, k.extra ? &xl : nullptr,
                         rout, rlse);
        const std::string tag = x.tag + fmt(" split=%g lens=%g extra=%g", k.split, k.lens, k.extra);
        c.expect_close(tag + " out", out.data(), rout.data(), out.size(), kTolAttention);
        c.expect_close(tag + " lse", lse.data(), rlse.data(), lse.size(), kTolLse);
    }
}

// ---------------------------------------------------------------------------------------------------
// LibraryDecode (FlashInfer) vs partial_attention_ids
// ---------------------------------------------------------------------------------------------------

// The same reference as check_decode, per (b, kv head) over its first lens tokens; planned twice per case
// (the second plan moves every length by one token, crossing a page boundary in some requests only, so
// both the page-table upload and its reuse are exercised), then run a third time with a second state
// merged by LSE (wave's estimation zone; one of its rows empty). Its output is fp16 (FlashInfer's): 2e-3.
void check_library_decode(Checker& c) {
    struct Case { int B, Hkv, g, cap, d; float qsigma; };
    const Case cases[] = {{1, 1, 1, 16, 128, 1.0f},  {2, 2, 4, 1008, 128, 2.0f}, {1, 2, 8, 5008, 64, 1.0f},
                          {3, 1, 3, 704, 64, 3.0f},  {1, 8, 4, 9008, 128, 1.0f}, {2, 8, 4, 8192, 128, 1.0f},
                          {2, 2, 6, 160, 128, 1.0f}};
    std::mt19937 rng(7);
    for (const Case& k : cases) {
        const std::string why = library_decode_unsupported(k.d, k.g);
        if (!why.empty()) {
            c.expect(false, "library decode unavailable: " + why);
            return;
        }
        const DecodeInputs x = decode_inputs(k.B, k.Hkv, k.g, k.cap, k.d, k.qsigma, rng);
        const int nbk = x.nbk, Hq = x.Hq;
        const auto& q = x.q;
        const Half &K = x.K, &V = x.V;
        auto dq = upload(q);
        auto dk = upload(K.bits), dv = upload(V.bits);
        LibraryDecode lib(x.s, 16);
        std::vector<int32_t> lens((size_t)nbk);
        std::uniform_int_distribution<int> ld(1, std::max(1, k.cap - 1));
        for (auto& l : lens) l = ld(rng);
        lens[0] = k.cap - 1;  // the last page: one token short of full, then full
        const auto xo = random_float((size_t)k.B * Hq * k.d, rng);
        auto xl = random_float((size_t)k.B * Hq, rng, 2.0f);
        xl[1 % xl.size()] = -INFINITY;  // an empty estimation partial
        auto dxo = upload(xo), dxl = upload(xl);
        for (int round = 0; round < 3; ++round) {
            if (round == 1)
                for (auto& l : lens) l = std::min(k.cap, l + 1);
            const bool extra = round == 2;
            std::vector<float> rout, rlse;
            reference_decode(q, K, V, lens, k.B, k.Hkv, k.g, k.cap, k.d, extra ? &xo : nullptr, extra ? &xl : nullptr,
                             rout, rlse);
            const std::string tag = x.tag + (extra ? std::string(" plan 1 + extra state") : fmt(" plan %g", round));
            auto dlens = upload(lens);
            // the lengths from the host (FlashInfer's planner), then from device memory (plan_device: wave's
            // device-resident step) split as the device's SM count asks, unsplit, and in 3 tiles; the next
            // round's plan() goes back to the host's plan
            for (const int how : {-1, 0, 1, 3}) {
                const bool on_device = how >= 0;
                DeviceBuffer<float> dout((size_t)k.B * Hq * k.d), dlse((size_t)k.B * Hq);
                poison(dout), poison(dlse);
                if (on_device) lib.plan_device(dlens.get(), nullptr, how);
                else lib.plan(lens.data());
                lib.run(dq.get(), dk.get(), dv.get(), dout.get(), dlse.get(), nullptr, extra ? dxo.get() : nullptr,
                        extra ? dxl.get() : nullptr);
                synchronize();
                const auto out = download(dout), lse = download(dlse);
                const std::string t = tag + (on_device ? fmt(" device lengths, max tiles %g", how) : std::string());
                c.expect_close(t + " out", out.data(), rout.data(), out.size(), 2e-3);
                c.expect_close(t + " lse", lse.data(), rlse.data(), lse.size(), kTolLse);
            }
        }
    }
    // unsupported shapes are refused by name before any work
    for (const auto& [d, g] : {std::pair{256, 4}, std::pair{128, 7}, std::pair{128, 5}}) {
        DecodeShape s;
        s.group = g, s.d = d, s.capacity = 64;
        bool refused = false;
        try {
            LibraryDecode lib(s, 16);
        } catch (const ParamError& e) {
            refused = std::string(e.what()).find(std::to_string(d == 256 ? d : g)) != std::string::npos;
        }
        c.expect(refused, fmt("library decode d=%g g=%g: not refused with its shape named", d, g));
    }
}

// cuDNN's fused attention (CudnnDecode) against the same reference, on the fp16-rounded queries it is
// given (it takes one dtype for Q, K and V): per-item lengths shared by the item's KV heads, including a
// length of 1, a full capacity and one not a multiple of 128; GQA groups 1-8, head_dim 64 and 128.
void check_cudnn_decode(Checker& c) {
    struct Case { int B, Hkv, g, cap, d; float qsigma; };
    const Case cases[] = {{1, 1, 1, 16, 128, 1.0f}, {2, 2, 4, 1008, 128, 2.0f}, {1, 2, 8, 5008, 64, 1.0f},
                          {3, 1, 3, 704, 64, 3.0f}, {2, 8, 4, 8192, 128, 1.0f}};
    std::mt19937 rng(11);
    for (const Case& k : cases) {
        const std::string why = cudnn_decode_unsupported(k.d, k.g);
        if (!why.empty()) {
            c.expect(false, "cudnn decode unavailable: " + why);
            return;
        }
        DecodeInputs x = decode_inputs(k.B, k.Hkv, k.g, k.cap, k.d, k.qsigma, rng);
        const int nbk = x.nbk, Hq = x.Hq;
        auto& q = x.q;
        const Half &K = x.K, &V = x.V;
        std::vector<int32_t> item((size_t)k.B);
        std::uniform_int_distribution<int> ld(1, k.cap);
        for (auto& l : item) l = ld(rng);
        item[0] = k.cap;                            // every row
        if (k.B > 1) item[1] = std::min(k.cap, 1);  // one token
        std::vector<int32_t> lens((size_t)nbk);
        for (int bk = 0; bk < nbk; ++bk) lens[(size_t)bk] = item[(size_t)(bk / k.Hkv)];
        auto dq = upload(q);
        auto dk = upload(K.bits), dv = upload(V.bits);
        auto dl = upload(item);
        for (float& x : q) x = half_to_float(float_to_half(x));  // what cuDNN computes with
        std::vector<float> rout, rlse;
        reference_decode(q, K, V, lens, k.B, k.Hkv, k.g, k.cap, k.d, nullptr, nullptr, rout, rlse);
        CudnnDecode dnn(x.s);
        DeviceBuffer<float> dout((size_t)k.B * Hq * k.d), dlse((size_t)k.B * Hq);
        poison(dout), poison(dlse);
        dnn.run(dq.get(), dk.get(), dv.get(), dl.get(), dout.get(), dlse.get());
        synchronize();
        const auto out = download(dout), lse = download(dlse);
        c.expect_close(x.tag + " out", out.data(), rout.data(), out.size(), 2e-3);
        c.expect_close(x.tag + " lse", lse.data(), rlse.data(), lse.size(), kTolLse);
        // PyTorch's inference graph: every item exactly L tokens (no mask, no lengths), no softmax stats
        // (the caller's lse left as it was)
        CudnnDecodeOptions po;
        po.stats = false, po.exact_len = k.cap > 1 ? k.cap / 2 + 1 : 1;
        const std::vector<int32_t> lens_l((size_t)nbk, po.exact_len);
        reference_decode(q, K, V, lens_l, k.B, k.Hkv, k.g, k.cap, k.d, nullptr, nullptr, rout, rlse);
        CudnnDecode exact(x.s, po);
        poison(dout), poison(dlse);
        const auto lse_before = download(dlse);
        exact.run(dq.get(), dk.get(), dv.get(), nullptr, dout.get(), dlse.get());
        synchronize();
        const auto out_l = download(dout), lse_after = download(dlse);
        c.expect_close(x.tag + " exact_len=" + std::to_string(po.exact_len) + " out", out_l.data(), rout.data(),
                       out_l.size(), 2e-3);
        c.expect(std::memcmp(lse_before.data(), lse_after.data(), lse_after.size() * sizeof(float)) == 0,
                 x.tag + ": without stats the lse buffer was written");
    }
    // a head_dim cuDNN's fused attention does not take is refused by name before any work
    DecodeShape s;
    s.d = 100, s.capacity = 64;
    bool refused = false;
    try {
        CudnnDecode dnn(s);
    } catch (const ParamError& e) {
        refused = std::string(e.what()).find("100") != std::string::npos;
    }
    c.expect(refused, "cudnn decode d=100: not refused with its head_dim named");
    DecodeShape ok_shape;
    ok_shape.capacity = 64;
    CudnnDecodeOptions too_long;
    too_long.exact_len = 65;
    refused = false;
    try {
        CudnnDecode dnn(ok_shape, too_long);
    } catch (const ParamError& e) {
        refused = std::string(e.what()).find("65") != std::string::npos;
    }
    c.expect(refused, "cudnn decode exact_len 65 > capacity 64: not refused with the length named");
}

// ---------------------------------------------------------------------------------------------------
// k-means
// ---------------------------------------------------------------------------------------------------

// Rows drawn around `centers` random directions (so assignments are well separated, as real keys are
// far from uniform) plus a common offset (what centering removes).
std::vector<float> clustered_rows(int n, int d, int centers, std::mt19937& rng) {
    const auto cen = random_float((size_t)centers * d, rng, 1.0f);
    const auto off = random_float((size_t)d, rng, 2.0f);
    std::normal_distribution<float> noise(0.0f, 0.3f);
    std::uniform_int_distribution<int> pick(0, centers - 1);
    std::vector<float> x((size_t)n * d);
    for (int i = 0; i < n; ++i) {
        const int j = pick(rng);
        for (int e = 0; e < d; ++e) x[(size_t)i * d + e] = cen[(size_t)j * d + e] + off[(size_t)e] + noise(rng);
    }
    return x;
}

double dot(const float* a, const float* b, int d) {
    double s = 0;
    for (int e = 0; e < d; ++e) s += (double)a[e] * b[e];
    return s;
}

void check_kmeans_assign(Checker& c) {
    struct Case { int n, k, d, S; };
    const Case cases[] = {{1, 1, 32, 1}, {3000, 100, 128, 1}, {5000, 300, 128, 3}, {777, 50, 256, 2}, {2048, 64, 64, 4}};
    std::mt19937 rng(2024);
    for (const Case& k : cases) {
        const auto x = random_float((size_t)k.n * k.d, rng);
        const auto cen = random_float((size_t)k.k * k.d, rng);
        KMeansParams kp;
        kp.k = k.k, kp.segment = k.S == 1 ? 0 : (k.n + k.S - 1) / k.S;
        const KMeansPlan plan = kmeans_plan(k.n, kp);
        const int S = plan.segments();
        auto dx = upload(x);
        auto dc = upload(cen);
        auto drb = upload(plan.row_begin), dcb = upload(plan.cluster_begin);
        DeviceBuffer<int32_t> da((size_t)k.n);
        for (const int radius : {0, 1, -1}) {
            poison(da);
            kmeans_assign(dx.get(), k.n, k.d, dc.get(), plan.k, drb.get(), dcb.get(), S, radius, da.get());
            synchronize();
            const auto got = download(da);
            std::vector<int32_t> ref((size_t)k.n);
            for (int s = 0; s < S; ++s) {
                const int r0 = plan.row_begin[s], ns = plan.row_begin[s + 1] - r0;
                const int c0 = radius < 0 ? 0 : plan.cluster_begin[std::max(0, s - radius)];
                const int ks = (radius < 0 ? plan.k : plan.cluster_begin[std::min(S, s + radius + 1)]) - c0;
                assign_max_inner_product(x.data() + (size_t)r0 * k.d, ns, cen.data() + (size_t)c0 * k.d, ks, k.d,
                                         ref.data() + r0);
                for (int i = 0; i < ns; ++i) ref[(size_t)r0 + i] += c0;
            }
            // a different pick is fine only when its inner product ties the reference's (float order)
            int diff = 0, bad = 0;
            for (int i = 0; i < k.n; ++i) {
                const int g = got[(size_t)i], r = ref[(size_t)i];
                if (g == r) continue;
                ++diff;
                const float* xi = x.data() + (size_t)i * k.d;
                const double best = dot(xi, cen.data() + (size_t)r * k.d, k.d);
                if (g < 0 || g >= plan.k || dot(xi, cen.data() + (size_t)g * k.d, k.d) < best - 1e-4 * (std::fabs(best) + 1))
                    ++bad;
            }
            const std::string tag = fmt("n=%g k=%g d=%g S=%g radius=%g", k.n, k.k, k.d, S, radius);
            c.expect(bad == 0, tag + fmt(": %g rows assigned to a worse centroid", bad));
            if (diff) c.note(tag + fmt(": %g rows differ by a tie", diff));
        }
    }
}

void check_kmeans_full(Checker& c) {
    struct Case { int n, d, segment; double tpc; int iters; };
    const Case cases[] = {{4096, 128, 1024, 16, 10}, {3000, 64, 0, 32, 5}, {2000, 128, 500, 16, 1}};
    std::mt19937 rng(31337);
    for (const Case& k : cases) {
        const auto x = clustered_rows(k.n, k.d, 40, rng);
        KMeansParams kp;
        kp.segment = k.segment, kp.tokens_per_cluster = k.tpc, kp.iters = k.iters;
        const KMeansResult ref = segmented_kmeans(x.data(), k.n, k.d, kp);
        const KMeansResult got = segmented_kmeans_gpu(x.data(), k.n, k.d, kp);
        const std::string tag = fmt("n=%g d=%g segment=%g iters=%g", k.n, k.d, k.segment, k.iters);
        c.expect(got.k == ref.k && got.assign.size() == ref.assign.size(), tag + ": shape");
        if (got.k != ref.k) continue;
        int same = 0;
        for (int i = 0; i < k.n; ++i) same += got.assign[(size_t)i] == ref.assign[(size_t)i];
        // Objective: mean squared distance to the assigned (final, un-normalized) centroid.
        auto objective = [&](const KMeansResult& r) {
            double s = 0;
            for (int i = 0; i < k.n; ++i) {
                const float* ci = r.centroids.data() + (size_t)r.assign[(size_t)i] * k.d;
                for (int e = 0; e < k.d; ++e) {
                    const double t = x[(size_t)i * k.d + e] - ci[e];
                    s += t * t;
                }
            }
            return s / k.n;
        };
        const double og = objective(got), orf = objective(ref);
        c.note(tag + fmt(": assignments equal %g / %g, objective gpu %g cpu %g", same, k.n, og, orf));
        // The trajectories only part on float-order ties, so nearly all rows agree and the objective
        // matches closely; a wrong update (say, not normalized) changes both by far more.
        c.expect(same >= 0.97 * k.n, tag + ": fewer than 97% of the assignments agree with the CPU");
        c.expect(std::fabs(og - orf) <= 0.01 * orf, tag + ": objective differs by more than 1%");
        c.expect(std::accumulate(got.sizes.begin(), got.sizes.end(), 0) == k.n, tag + ": sizes sum to n");
    }
}

}  // namespace

// The launch gate (LaunchGate, the wave run's timing): the work enqueued behind a held gate runs once it
// is released, and a gate never released ends by its timeout, says so, and leaves the stream running.
void check_launch_gate(Checker& c) {
    Stream s;
    const size_t n = 4096;
    DeviceBuffer<int32_t> dev(n);
    PinnedBuffer<int32_t> src(n);
    std::vector<int32_t> got(n);
    const auto all_are = [&](int32_t v) { return std::all_of(got.begin(), got.end(), [&](int32_t x) { return x == v; }); };
    {
        LaunchGate gate;
        gate.hold(s.get());
        std::fill(src.get(), src.get() + n, 7);
        copy_h2d_async(dev.get(), src.get(), src.bytes(), s.get());
        gate.release();
        s.synchronize();
        copy_d2h(got.data(), dev.get(), dev.bytes());
        c.expect(all_are(7), "the copy enqueued behind a released gate ran");
        c.expect(!gate.timed_out(), "a released gate reports no timeout");
    }
    {
        LaunchGate gate(2000);  // 2 ms
        gate.hold(s.get());
        std::fill(src.get(), src.get() + n, 9);
        copy_h2d_async(dev.get(), src.get(), src.bytes(), s.get());
        s.synchronize();  // never released
        copy_d2h(got.data(), dev.get(), dev.bytes());
        c.expect(all_are(9), "the copy enqueued behind a gate left held ran after its timeout");
        c.expect(gate.timed_out(), "a gate left held reports its timeout");
    }
    {
        LaunchGate never;  // the layers read timed_out() whether or not the step was gated
        never.release();
        c.expect(!never.timed_out(), "a gate never held reports a timeout");
    }
    bool refused = false;
    try {
        LaunchGate bad(0);
    } catch (const ParamError&) {
        refused = true;
    }
    c.expect(refused, "a gate with no timeout is refused");
}

std::vector<CheckCase> gpu_checks() {
    return {{"ClusterRank", check_cluster_rank},   {"ClusterSelect", check_cluster_select},   {"EstimateAttention", check_estimate},
            {"CopySegments", check_copy_segments}, {"GatherClusters", check_gather_clusters},
            {"DecodeAttention", check_decode},
            {"LibraryDecode", check_library_decode}, {"CudnnDecode", check_cudnn_decode},
            {"KMeansAssign", check_kmeans_assign}, {"KMeansSegmented", check_kmeans_full},
            {"LaunchGate", check_launch_gate}};
}

}  // namespace retro::cuda
