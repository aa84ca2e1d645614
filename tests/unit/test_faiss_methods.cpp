// FAISS baselines (faiss_flat / faiss_ivf / faiss_hnsw), the AnnIndex wrapper and ood_recall: full
// retrieval equals full attention, the static pattern is always attended, no duplicate ids, the MIPS-to-L2
// reduction is exact at nprobe = nlist, scan counts, and the out-of-distribution gap of IVF.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "analysis/ood_recall.hpp"
#include "core/error.hpp"
#include "methods/faiss_methods.hpp"
#include "methods/params.hpp"
#include "metrics/evaluator.hpp"
#include "method_harness.hpp"

using namespace retro;
using namespace retro::method_test;

namespace {

// Keys in blobs around a shared offset, random values, queries near blobs (scaled up so attention is peaked).
HeadSlice make_head(int prompt_len, int steps, int d, int group, unsigned seed) {
    return blob_head({.prompt_len = prompt_len, .steps = steps, .d = d, .group = group, .seed = seed});
}

const char* kMethods[] = {"faiss_flat", "faiss_ivf", "faiss_hnsw"};

// Parameters that make each index exhaustive.
nlohmann::json exhaustive(const std::string& name) {
    nlohmann::json p = {{"k", 100000}, {"sink", 8}, {"window", 32}};
    if (name == "faiss_ivf") p.update({{"nlist", 16}, {"nprobe", 16}});
    if (name == "faiss_hnsw") p.update({{"ef_search", 4000}});
    return p;
}

}  // namespace

TEST(FaissMethods, AreRegisteredWithSourcedDefaults) {
    for (const char* name : kMethods) {
        const MethodInfo& info = find_method(name);
        const auto p = resolve_params(info, nlohmann::json::object());
        EXPECT_EQ(p.at("k").get<double>(), 100) << name;
        EXPECT_EQ(p.at("sink").get<int>(), 128) << name;
        EXPECT_EQ(p.at("window").get<int>(), 512) << name;
        EXPECT_EQ(p.at("placement").get<std::string>(), "gpu_fetch") << name;
        for (const auto& s : info.params) EXPECT_FALSE(s.source.empty()) << name << " " << s.name;
    }
    const auto ivf = resolve_params(find_method("faiss_ivf"), nlohmann::json::object());
    EXPECT_EQ(ivf.at("nlist").get<int>(), 512);
    EXPECT_EQ(ivf.at("nprobe").get<double>(), 150);
    EXPECT_EQ(ivf.at("mips").get<std::string>(), "ip");
    const auto hnsw = resolve_params(find_method("faiss_hnsw"), nlohmann::json::object());
    EXPECT_EQ(hnsw.at("M").get<int>(), 32);
    EXPECT_EQ(hnsw.at("ef_construction").get<int>(), 40);
    EXPECT_EQ(hnsw.at("ef_search").get<int>(), 16);
}

TEST(FaissMethods, RejectBadParametersNamingThem) {
    auto expect_error = [&](const char* m, const nlohmann::json& j, const std::string& name) {
        try {
            resolve_params(find_method(m), j);
            FAIL() << "accepted " << j.dump();
        } catch (const ConfigError& e) {
            EXPECT_NE(std::string(e.what()).find("'" + name + "'"), std::string::npos) << e.what();
        }
    };
    expect_error("faiss_flat", {{"k", 100.5}}, "k");  // a budget >= 1 must be an integer
    expect_error("faiss_ivf", {{"nprobe", 2.5}}, "nprobe");
    expect_error("faiss_ivf", {{"mips", "cosine"}}, "mips");
    expect_error("faiss_hnsw", {{"M", 1}}, "M");
    expect_error("faiss_flat", {{"mips", "ip"}}, "mips");  // flat has no mips option
    EXPECT_NO_THROW(resolve_params(find_method("faiss_ivf"), {{"nprobe", 0.25}, {"k", 0.01}}));
}

TEST(FaissMethods, ExhaustiveSearchEqualsFullAttention) {
    const HeadSlice h = make_head(700, 3, 32, 4, 1);
    for (const char* name : kMethods)
        for (const char* decode : {"index", "static"}) {
            nlohmann::json p = exhaustive(name);
            p["decode_tokens"] = decode;
            const Replay r = replay(h, name, p);
            for (size_t t = 0; t < r.metrics.size(); ++t) {
                ASSERT_EQ(r.sels[t].exact.size(), (size_t)h.group) << name;  // per_head lists
                for (const auto& qm : r.metrics[t]) {
                    EXPECT_NEAR(qm.out_err, 0.0, 1e-5) << name << " " << decode << " step " << t;
                    EXPECT_NEAR(qm.mass, 1.0, 1e-5) << name;
                    EXPECT_DOUBLE_EQ(qm.recall[1], 1.0) << name;
                    EXPECT_NEAR(qm.exact_frac, 1.0, 1e-12) << name;
                }
            }
        }
}

TEST(FaissMethods, UnionListsAreDuplicateFreeAndCoverEveryHeadsResults) {
    const HeadSlice h = make_head(900, 3, 32, 4, 2);
    for (const char* name : kMethods) {
        nlohmann::json p = {{"k", 40}, {"sink", 4}, {"window", 16}, {"gqa", "per_head"}};
        if (std::string(name) == "faiss_ivf") p.update({{"nlist", 16}, {"nprobe", 4}});
        const Replay per = replay(h, name, p);
        p["gqa"] = "union";
        const Replay uni = replay(h, name, p);  // the evaluator throws on a duplicate
        for (size_t t = 0; t < uni.sels.size(); ++t) {
            ASSERT_EQ(uni.sels[t].exact.size(), 1u);
            const std::set<int32_t> u(uni.sels[t].exact[0].begin(), uni.sels[t].exact[0].end());
            EXPECT_EQ(u.size(), uni.sels[t].exact[0].size());
            for (const auto& l : per.sels[t].exact)
                for (int32_t id : l) EXPECT_TRUE(u.count(id)) << name << " id " << id;
            // gpu_fetch: the union of retrieved (non-static) tokens crosses PCIe, the same in both modes
            EXPECT_DOUBLE_EQ(uni.sels[t].h2d_bytes, per.sels[t].h2d_bytes) << name;
        }
    }
}

TEST(FaissMethods, StaticPatternIsAlwaysAttended) {
    const HeadSlice h = make_head(800, 4, 32, 2, 3);
    const int sink = 6, window = 24;
    for (const char* name : kMethods)
        for (const char* decode : {"index", "static"})
            for (const char* gqa : {"per_head", "union"}) {
                nlohmann::json p = {{"k", 5}, {"sink", sink}, {"window", window}, {"decode_tokens", decode}, {"gqa", gqa}};
                if (std::string(name) == "faiss_ivf") p.update({{"nlist", 8}, {"nprobe", 1}});
                const Replay r = replay(h, name, p);
                for (int t = 0; t < h.num_steps; ++t) {
                    const int n = h.visible(t);
                    const int w0 = std::string(decode) == "static" ? h.prompt_len - window : n - window;
                    for (const auto& l : r.sels[(size_t)t].exact) {
                        const std::set<int32_t> s(l.begin(), l.end());
                        for (int i = 0; i < sink; ++i) EXPECT_TRUE(s.count(i)) << name << " sink " << i;
                        for (int i = w0; i < n; ++i) EXPECT_TRUE(s.count(i)) << name << " window " << i;
                        const size_t static_size = (size_t)(sink + (n - w0));
                        if (std::string(gqa) == "per_head") {
                            EXPECT_EQ(l.size(), static_size + 5) << name;
                        } else {
                            EXPECT_GE(l.size(), static_size + 5) << name;
                        }
                    }
                    // GPU keeps exactly the static pattern
                    EXPECT_DOUBLE_EQ(r.fps[(size_t)t].gpu_bytes, (double)(sink + n - w0) * 2 * 32 * 2) << name;
                }
            }
}

TEST(FaissMethods, HnswReturnsKTokensWhenKExceedsTheBeam) {
    const HeadSlice h = make_head(1200, 1, 32, 2, 9);
    const Replay r = replay(h, "faiss_hnsw", {{"k", 300}, {"ef_search", 16}, {"sink", 4}, {"window", 16}});
    for (const auto& l : r.sels[0].exact) EXPECT_EQ(l.size(), 4u + 16u + 300u);
}

TEST(FaissMethods, TrafficAndScanAccounting) {
    const HeadSlice h = make_head(1000, 2, 32, 4, 4);
    const double kvb = 2.0 * 32 * 2;  // f16 K+V per token
    nlohmann::json p = {{"k", 20}, {"sink", 4}, {"window", 16}, {"nlist", 10}, {"nprobe", 2}};
    const Replay r = replay(h, "faiss_ivf", p);
    for (const auto& s : r.sels) {
        std::set<int32_t> retrieved;
        for (const auto& l : s.exact)
            for (int32_t id : l) retrieved.insert(id);
        const double n_static = 4 + 16;
        EXPECT_DOUBLE_EQ(s.h2d_bytes, ((double)retrieved.size() - n_static) * kvb);
        // the same tokens are published for the system model's block cache, each once
        EXPECT_EQ(std::set<int32_t>(s.fetch_tokens.begin(), s.fetch_tokens.end()).size(), s.fetch_tokens.size());
        EXPECT_DOUBLE_EQ((double)s.fetch_tokens.size() * kvb, s.h2d_bytes);
        // one search per query head: nlist centroids + the two probed lists, never the whole index
        EXPECT_GE(s.scan_ops, 4.0 * 10);
        EXPECT_LT(s.scan_ops, 4.0 * (10 + 980));
    }
    // step 0 also reports the window token evicted into the CPU index, on top of the 4 queries
    EXPECT_DOUBLE_EQ(r.sels[0].d2h_bytes, 4.0 * 32 * 2 + kvb);
    p["placement"] = "cpu_attention";
    const Replay c = replay(h, "faiss_ivf", p);
    EXPECT_DOUBLE_EQ(c.sels[1].h2d_bytes, 4.0 * (32 * 2 + 4));
    EXPECT_TRUE(c.sels[1].fetch_tokens.empty());  // no KV crosses PCIe
    const Replay f = replay(h, "faiss_flat", {{"k", 20}, {"sink", 4}, {"window", 16}});
    EXPECT_DOUBLE_EQ(f.sels[0].scan_ops, 4.0 * (1000 - 20 + 1));  // every indexed key, per query head
}

TEST(AnnIndex, IvfWithL2TransformFindsExactTopKAtFullProbe) {
    std::mt19937 rng(5);
    std::normal_distribution<float> N(0.0f, 1.0f);
    const int n = 1500, d = 24, k = 30;
    std::vector<float> keys((size_t)n * d);
    // norms vary a lot: a MIPS search that ignored norms would fail
    for (int i = 0; i < n; ++i) {
        const float scale = 0.3f + 2.0f * (float)(i % 7) / 7.0f;
        for (int e = 0; e < d; ++e) keys[(size_t)i * d + e] = scale * N(rng);
    }
    std::vector<int32_t> ids((size_t)n);
    std::iota(ids.begin(), ids.end(), 1000);
    for (MipsMode mips : {MipsMode::l2_transform, MipsMode::ip}) {
        AnnParams ap;
        ap.kind = AnnKind::ivf;
        ap.mips = mips;
        ap.nlist = 20;
        AnnIndex idx(d, ap);
        idx.build(keys.data(), ids.data(), n);
        ASSERT_EQ(idx.nlist(), 20);
        AnnSearch s;
        s.nprobe = 20;
        std::vector<int32_t> found;
        for (int qi = 0; qi < 10; ++qi) {
            std::vector<float> q((size_t)d);
            for (auto& v : q) v = N(rng);
            const double scanned = idx.search(q.data(), k, s, found);
            EXPECT_DOUBLE_EQ(scanned, 20.0 + n);
            ASSERT_EQ(found.size(), (size_t)k);
            std::vector<float> sc((size_t)n);
            for (int i = 0; i < n; ++i) sc[(size_t)i] = dot(q.data(), keys.data() + (size_t)i * d, d);
            std::vector<float> sorted = sc;
            std::sort(sorted.begin(), sorted.end(), std::greater<float>());
            const float kth = sorted[(size_t)k - 1];
            std::set<int32_t> uniq(found.begin(), found.end());
            EXPECT_EQ(uniq.size(), found.size());
            for (int32_t id : found) {
                ASSERT_GE(id, 1000);
                EXPECT_GE(sc[(size_t)(id - 1000)], kth - 1e-4f * (1 + std::abs(kth))) << mips_name(mips);
            }
        }
    }
}

// HNSW's storage computes its own distances (VecFlat: Debian's FAISS has only scalar ones): with the beam
// covering every key the search is exact, for inner product and the L2 transform, in the index, in its
// copy (the shared-build path, which must keep that storage) and after an add.
TEST(AnnIndex, HnswFindsExactTopKAtFullBeamInItsCopyAndAfterAdd) {
    std::mt19937 rng(7);
    std::normal_distribution<float> N(0.0f, 1.0f);
    const int n = 1200, d = 64, k = 25;
    std::vector<float> keys((size_t)(n + 1) * d);
    for (int i = 0; i <= n; ++i) {
        const float scale = 0.3f + 2.0f * (float)(i % 5) / 5.0f;
        for (int e = 0; e < d; ++e) keys[(size_t)i * d + e] = scale * N(rng);
    }
    std::vector<int32_t> ids((size_t)n);
    std::iota(ids.begin(), ids.end(), 0);
    const auto exact_ok = [&](const std::vector<float>& q, const std::vector<int32_t>& found, int total) {
        std::vector<float> sc((size_t)total);
        for (int i = 0; i < total; ++i) sc[(size_t)i] = dot(q.data(), keys.data() + (size_t)i * d, d);
        std::vector<float> sorted = sc;
        std::sort(sorted.begin(), sorted.end(), std::greater<float>());
        const float kth = sorted[(size_t)k - 1];
        int bad = (int)found.size() != k;
        for (int32_t id : found) bad += sc[(size_t)id] < kth - 1e-4f * (1 + std::abs(kth));
        return bad == 0;
    };
    for (MipsMode mips : {MipsMode::ip, MipsMode::l2_transform}) {
        AnnParams ap;
        ap.kind = AnnKind::hnsw;
        ap.mips = mips;
        AnnIndex idx(d, ap);
        idx.build(keys.data(), ids.data(), n);
        AnnIndex copy(idx);
        AnnSearch s;
        s.ef_search = n + 1;
        std::vector<int32_t> a, b;
        for (int qi = 0; qi < 8; ++qi) {
            std::vector<float> q((size_t)d);
            for (auto& v : q) v = N(rng);
            idx.search(q.data(), k, s, a);
            copy.search(q.data(), k, s, b);
            EXPECT_TRUE(exact_ok(q, a, n)) << mips_name(mips) << " query " << qi;
            EXPECT_EQ(a, b) << mips_name(mips) << ": the copy searches differently";
        }
        // a key added after the build that is the query itself, scaled up: the best match under IP
        std::vector<float> q(keys.begin() + (size_t)n * d, keys.begin() + (size_t)(n + 1) * d);
        for (int e = 0; e < d; ++e) keys[(size_t)n * d + e] = 4.0f * q[(size_t)e];
        idx.add(keys.data() + (size_t)n * d, n);
        idx.search(q.data(), k, s, a);
        if (mips == MipsMode::ip) EXPECT_TRUE(exact_ok(q, a, n + 1)) << "after add";
        ASSERT_FALSE(a.empty());
        if (mips == MipsMode::ip) EXPECT_EQ(a[0], n);
    }
}

TEST(AnnIndex, AddAndScanCounts) {
    std::mt19937 rng(6);
    std::normal_distribution<float> N(0.0f, 1.0f);
    const int n = 400, d = 16;
    std::vector<float> keys((size_t)(n + 1) * d);
    for (auto& v : keys) v = N(rng);
    std::vector<int32_t> ids((size_t)n);
    std::iota(ids.begin(), ids.end(), 0);
    for (AnnKind kind : {AnnKind::flat, AnnKind::ivf, AnnKind::hnsw})
        for (MipsMode mips : {MipsMode::ip, MipsMode::l2_transform}) {
            AnnParams ap;
            ap.kind = kind;
            ap.mips = mips;
            ap.nlist = 8;
            AnnIndex idx(d, ap);
            idx.build(keys.data(), ids.data(), n);
            // a key added later is found by a query equal to a large multiple of it
            std::vector<float> big(keys.begin() + (size_t)n * d, keys.end());
            idx.add(big.data(), 7777);
            EXPECT_EQ(idx.size(), n + 1);
            for (auto& v : big) v *= 50;
            AnnSearch s;
            s.nprobe = 8;
            s.ef_search = 200;
            std::vector<int32_t> found;
            const double scanned = idx.search(big.data(), 5, s, found);
            ASSERT_FALSE(found.empty());
            EXPECT_TRUE(std::find(found.begin(), found.end(), 7777) != found.end())
                << ann_kind_name(kind) << " " << mips_name(mips);
            if (kind == AnnKind::flat) {
                EXPECT_DOUBLE_EQ(scanned, n + 1.0);
            }
            if (kind == AnnKind::ivf) {
                EXPECT_DOUBLE_EQ(scanned, 8.0 + n + 1.0);
            }
            if (kind == AnnKind::hnsw) {
                EXPECT_GT(scanned, 5.0);
                EXPECT_LE(scanned, 2.0 * (n + 1));
            }
            EXPECT_GE(idx.overhead_bytes(), 0.0);
        }
    AnnIndex empty(d, AnnParams{});
    std::vector<int32_t> found{1, 2};
    EXPECT_EQ(empty.search(keys.data(), 5, AnnSearch{}, found), 0.0);
    EXPECT_TRUE(found.empty());
}

namespace {

// Keys: blob content in the first half of the channels (high variance), small noise in the second half.
// In-distribution queries are keys; out-of-distribution queries point into the low-variance half, where
// the keys' top inner products are spread over every cluster (the synthetic generator's OOD model).
HeadSlice ood_head(bool shifted, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> N(0.0f, 1.0f);
    const int n = 4000, d = 32, h = d / 2, blobs = 16, group = 2, steps = 16;
    std::vector<float> c((size_t)blobs * h);
    for (auto& v : c) v = 1.5f * N(rng);
    HeadSlice s;
    s.head_dim = d;
    s.group = group;
    s.prompt_len = n;
    s.num_steps = steps;
    s.keys.resize((size_t)(n + steps) * d);
    s.values.assign((size_t)(n + steps) * d, 0.0f);
    for (int i = 0; i < n + steps; ++i) {
        const int b = (int)(rng() % blobs);
        for (int e = 0; e < h; ++e) s.keys[(size_t)i * d + e] = c[(size_t)b * h + e] + 0.3f * N(rng);
        for (int e = h; e < d; ++e) s.keys[(size_t)i * d + e] = 0.1f * N(rng);
    }
    s.queries.resize((size_t)group * steps * d);
    for (int g = 0; g < group; ++g)
        for (int t = 0; t < steps; ++t) {
            float* q = s.queries.data() + ((size_t)g * steps + t) * d;
            if (shifted) {  // far away, in the band where keys barely vary
                for (int e = 0; e < h; ++e) q[e] = 0.05f * N(rng);
                for (int e = h; e < d; ++e) q[e] = 10.0f * N(rng);
            } else {  // drawn like a key
                const int b = (int)(rng() % blobs);
                for (int e = 0; e < h; ++e) q[e] = c[(size_t)b * h + e] + 0.3f * N(rng);
                for (int e = h; e < d; ++e) q[e] = 0.1f * N(rng);
            }
        }
    return s;
}

}  // namespace

TEST(OodRecall, ShiftedQueriesNeedFarMoreScanningThanKeys) {
    OodRecallParams p;
    p.index.kind = AnnKind::ivf;
    p.index.nlist = 64;
    p.nprobe = {4, 8, 64};
    p.k = 50;
    p.key_queries = 64;
    const OodRecallResult ood = ood_recall(ood_head(true, 7), p);
    const OodRecallResult ind = ood_recall(ood_head(false, 7), p);
    ASSERT_EQ(ood.points.size(), 3u);
    EXPECT_EQ(ood.n_keys, 4000);
    EXPECT_EQ(ood.n_decode, 32);
    EXPECT_EQ(ood.n_key_queries, 64);
    EXPECT_EQ(ood.nlist, 64);
    for (const auto* r : {&ood, &ind}) {
        // scanned grows with nprobe; nprobe = nlist scans everything (plus the centroids) and is exact
        EXPECT_LT(r->points[0].scanned_decode, r->points[1].scanned_decode);
        EXPECT_NEAR(r->points[2].scanned_decode, 1.0 + 64.0 / 4000, 1e-9);
        EXPECT_NEAR(r->points[2].scanned_keys, 1.0 + 64.0 / 4000, 1e-9);
        EXPECT_DOUBLE_EQ(r->points[2].recall_decode, 1.0);
        EXPECT_DOUBLE_EQ(r->points[2].recall_keys, 1.0);
        // keys as queries are in distribution: a few lists suffice
        EXPECT_GT(r->points[1].recall_keys, 0.8);
    }
    // out-of-distribution queries: at the same nprobe, recall collapses towards the scanned fraction
    EXPECT_LT(ood.points[1].recall_decode, ood.points[1].recall_keys - 0.4);
    EXPECT_LT(ood.points[1].recall_decode, 0.4);
    // queries drawn like keys behave like keys
    EXPECT_GT(ind.points[1].recall_decode, ind.points[1].recall_keys - 0.15);
}

TEST(OodRecall, FlatIsExactAndInputsAreChecked) {
    OodRecallParams p;
    p.index.kind = AnnKind::flat;
    p.k = 20;
    p.key_queries = 16;
    const HeadSlice s = ood_head(true, 8);
    const OodRecallResult r = ood_recall(s, p);
    ASSERT_EQ(r.points.size(), 1u);
    EXPECT_DOUBLE_EQ(r.points[0].recall_decode, 1.0);
    EXPECT_DOUBLE_EQ(r.points[0].recall_keys, 1.0);
    EXPECT_DOUBLE_EQ(r.points[0].scanned_decode, 1.0);
    p.k = 0;
    EXPECT_THROW(ood_recall(s, p), ParamError);
    p.k = 10;
    p.index.kind = AnnKind::ivf;
    p.nprobe = {0};
    EXPECT_THROW(ood_recall(s, p), ParamError);
}
