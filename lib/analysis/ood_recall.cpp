// Recall vs. scanned fraction with decode queries and with keys as queries (RetrievalAttention Fig. 3a/6).
#include "analysis/ood_recall.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "attention/attention.hpp"
#include "core/error.hpp"

namespace retro {

namespace {

struct Query {
    const float* q = nullptr;
    int self = -1;  ///< key query: the token excluded from truth and results
    std::vector<float> scores;  ///< [n] q.k over the prompt keys (self = -inf)
    float threshold = 0;        ///< tie-tolerant k-th score
};

// Exact scores and the k-th score threshold (the harness's tie rule: within 1e-6 |s_k|).
void prepare(Query& qu, const float* keys, int n, int d, int k) {
    qu.scores.resize((size_t)n);
    attention_scores(qu.q, keys, n, d, 1.0f, qu.scores.data());
    if (qu.self >= 0) qu.scores[(size_t)qu.self] = -std::numeric_limits<float>::infinity();
    std::vector<float> tmp = qu.scores;
    const int kk = std::min(k, n - (qu.self >= 0 ? 1 : 0));
    std::nth_element(tmp.begin(), tmp.begin() + (kk - 1), tmp.end(), std::greater<float>());
    const float sk = tmp[(size_t)kk - 1];
    qu.threshold = sk - 1e-6f * std::abs(sk);
}

// recall@k of one search and its scanned count.
double search_recall(AnnIndex& idx, const Query& qu, int k, const AnnSearch& s, std::vector<int32_t>& found,
                     double& scanned) {
    const int n = idx.size();
    const int kk = std::min(k, n - (qu.self >= 0 ? 1 : 0));
    if (kk <= 0) return 0;
    scanned = idx.search(qu.q, qu.self >= 0 ? kk + 1 : kk, s, found);
    int hits = 0, taken = 0;
    for (int32_t id : found) {
        if (id == qu.self) continue;
        if (taken++ == kk) break;
        if (qu.scores[(size_t)id] >= qu.threshold) ++hits;
    }
    return (double)std::min(hits, kk) / kk;
}

}  // namespace

OodRecallResult ood_recall(const HeadSlice& slice, const OodRecallParams& p) {
    const int n = slice.prompt_len, d = slice.head_dim;
    if (n <= 0) throw ParamError("ood_recall: the slice has no prompt keys");
    if (p.k < 1) throw ParamError("ood_recall: k must be >= 1 (got " + std::to_string(p.k) + ")");
    if (p.key_queries < 0) throw ParamError("ood_recall: key_queries must be >= 0");

    std::vector<std::pair<std::string, AnnSearch>> settings;
    switch (p.index.kind) {
        case AnnKind::flat: settings.push_back({"flat", {}}); break;
        case AnnKind::ivf:
            for (int np : p.nprobe.empty() ? std::vector<int>{1} : p.nprobe) {
                if (np < 1) throw ParamError("ood_recall: nprobe must be >= 1 (got " + std::to_string(np) + ")");
                AnnSearch s;
                s.nprobe = np;
                settings.push_back({"nprobe=" + std::to_string(np), s});
            }
            break;
        case AnnKind::hnsw:
            for (int ef : p.ef_search.empty() ? std::vector<int>{16} : p.ef_search) {
                if (ef < 1) throw ParamError("ood_recall: ef_search must be >= 1 (got " + std::to_string(ef) + ")");
                AnnSearch s;
                s.ef_search = ef;
                settings.push_back({"ef=" + std::to_string(ef), s});
            }
            break;
    }

    OodRecallResult res;
    res.n_keys = n;
    AnnIndex idx(d, p.index);
    std::vector<int32_t> ids((size_t)n);
    std::iota(ids.begin(), ids.end(), 0);
    const auto t0 = std::chrono::steady_clock::now();
    idx.build(slice.keys.data(), ids.data(), n);
    res.build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    res.nlist = idx.nlist();

    // Queries: the group's decode queries, then sampled keys.
    std::vector<Query> dec, key;
    if (p.decode_queries)
        for (int g = 0; g < slice.group; ++g)
            for (int t = 0; t < slice.num_steps; ++t) dec.push_back({slice.query(g, t), -1, {}, 0});
    const int nk = std::min(p.key_queries, n > 1 ? n : 0);
    if (nk > 0) {
        std::mt19937_64 rng(p.seed * 0x9E3779B97F4A7C15ull + (uint64_t)slice.layer * 1000003u + (uint64_t)slice.kv_head);
        std::vector<int> perm((size_t)n);
        std::iota(perm.begin(), perm.end(), 0);
        for (int i = 0; i < nk; ++i) {  // partial Fisher-Yates: nk distinct tokens
            std::uniform_int_distribution<int> u(i, n - 1);
            std::swap(perm[(size_t)i], perm[(size_t)u(rng)]);
            key.push_back({slice.key(perm[(size_t)i]), perm[(size_t)i], {}, 0});
        }
    }
    for (auto& q : dec) prepare(q, slice.keys.data(), n, d, p.k);
    for (auto& q : key) prepare(q, slice.keys.data(), n, d, p.k);
    res.n_decode = (int)dec.size();
    res.n_key_queries = (int)key.size();

    std::vector<int32_t> found;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (const auto& setting : settings) {
        // named members, not a structured binding: clang 14 (the fuzz build) cannot capture one in a lambda
        const auto& name = setting.first;
        const auto& s = setting.second;
        OodRecallPoint pt;
        pt.setting = name;
        pt.value = p.index.kind == AnnKind::ivf ? s.nprobe : p.index.kind == AnnKind::hnsw ? s.ef_search : 0;
        auto run = [&](const std::vector<Query>& qs, double& scanned, double& recall) {
            if (qs.empty()) {
                scanned = recall = nan;
                return;
            }
            double sc = 0, rc = 0;
            for (const auto& q : qs) {
                double one = 0;
                rc += search_recall(idx, q, p.k, s, found, one);
                sc += one / n;
            }
            scanned = sc / qs.size();
            recall = rc / qs.size();
        };
        run(dec, pt.scanned_decode, pt.recall_decode);
        run(key, pt.scanned_keys, pt.recall_keys);
        res.points.push_back(pt);
    }
    return res;
}

}  // namespace retro
