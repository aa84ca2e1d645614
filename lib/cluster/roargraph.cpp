#include "cluster/roargraph.hpp"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "core/error.hpp"
#include "core/host.hpp"
#include "core/top_k.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace retro {

size_t RoarGraph::edges() const {
    size_t e = 0;
    for (const auto& l : adj) e += l.size();
    return e;
}

namespace {

struct Nb {
    float dist;  // -inner product with the target
    int32_t id;
};
bool nb_less(const Nb& a, const Nb& b) { return a.dist < b.dist || (a.dist == b.dist && a.id < b.id); }

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

bool contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

class Builder {
  public:
    Builder(const float* keys, int n, int d, const RoarGraphParams& p) : x_(keys), n_(n), d_(d), p_(p) {}

    double ops = 0;

    float dist(int32_t a, int32_t b) {
        ops += 1;
        return -dot_f32(x_ + (size_t)a * d_, x_ + (size_t)b * d_, d_);
    }

    /// Occlusion pruning around `tgt`: pool (any order, may hold duplicates or tgt) -> at most `cap`
    /// ids; nearest first, p kept unless some kept r has dist(p, r) < dist(p, tgt). `skip_head`: ids
    /// that may not be the first pick (the enhancement skips projection neighbours at the head).
    /// `pad`: fill up to cap with the nearest dropped candidates (projection lists) or not (supply).
    std::vector<int32_t> prune(int32_t tgt, std::vector<Nb> pool, int cap, bool pad,
                               const std::vector<int32_t>* skip_head = nullptr) {
        std::sort(pool.begin(), pool.end(), nb_less);
        pool.erase(std::unique(pool.begin(), pool.end(), [](const Nb& a, const Nb& b) { return a.id == b.id; }),
                   pool.end());
        // (a repeated id has the same distance, so sorting by (dist, id) makes repeats adjacent)
        std::vector<int32_t> out;
        size_t start = 0;
        while (start < pool.size() &&
               (pool[start].id == tgt || (skip_head && contains(*skip_head, pool[start].id))))
            ++start;
        if (start >= pool.size()) return out;
        out.push_back(pool[start].id);
        for (size_t i = start + 1; i < pool.size() && (int)out.size() < cap; ++i) {
            const Nb& c = pool[i];
            if (c.id == tgt || contains(out, c.id)) continue;
            bool occluded = false;
            for (int32_t r : out)
                if (dist(c.id, r) < c.dist) {
                    occluded = true;
                    break;
                }
            if (!occluded) out.push_back(c.id);
        }
        if (pad)
            for (size_t i = 0; i < pool.size() && (int)out.size() < cap; ++i)
                if (pool[i].id != tgt && !contains(out, pool[i].id)) out.push_back(pool[i].id);
        return out;
    }

    std::vector<Nb> with_dists(int32_t tgt, const std::vector<int32_t>& ids) {
        std::vector<Nb> v;
        v.reserve(ids.size());
        for (int32_t i : ids)
            if (i != tgt) v.push_back({dist(tgt, i), i});
        return v;
    }

    /// Adds src to the lists of its neighbours in g; a list at `full` is re-pruned to `prune_cap`.
    void add_reverse(std::vector<std::vector<int32_t>>& g, int32_t src, int full, int prune_cap, bool pad) {
        const std::vector<int32_t> nbrs = g[(size_t)src];
        for (int32_t des : nbrs) {
            auto& dl = g[(size_t)des];
            if (contains(dl, src)) continue;
            if ((int)dl.size() < full) {
                dl.push_back(src);
                continue;
            }
            std::vector<int32_t> cand = dl;
            cand.push_back(src);
            dl = prune(des, with_dists(des, cand), prune_cap, pad);
        }
    }

  private:
    const float* x_;
    int n_, d_;
    RoarGraphParams p_;
};

void check_params(int n, int d, int m, const RoarGraphParams& p) {
    auto bad = [](const std::string& name, long v, const std::string& want) {
        throw ParamError("roargraph: parameter '" + name + "' = " + std::to_string(v) + ": expected " + want);
    };
    if (n < 1) bad("n (keys)", n, ">= 1 keys");
    if (d < 1) bad("d", d, ">= 1");
    if (m < 1) bad("training queries", m, ">= 1 (the graph is built from training queries)");
    if (p.nq < 1) bad("nq", p.nq, ">= 1");
    if (p.M < 1) bad("M", p.M, ">= 1");
    if (p.build_L < 1) bad("build_L", p.build_L, ">= 1");
    if (p.enhance_batch < 1) bad("enhance_batch", p.enhance_batch, ">= 1 keys per batch");
    if (p.threads < 0) bad("threads", p.threads, ">= 0 (0 = the compute threads)");
}

int thread_index() {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

}  // namespace

std::vector<std::vector<int32_t>> exact_mips_knn(const float* keys, int n, int d, const float* queries,
                                                 int m, int nq) {
    const int k = std::min(nq, n);
    std::vector<std::vector<int32_t>> out((size_t)m);
    const int B = 32;  // query rows per sgemm block
    std::vector<float> ip((size_t)B * n);
    TopKScratch scratch;
    for (int r0 = 0; r0 < m; r0 += B) {
        const int rows = std::min(B, m - r0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, d, 1.0f, queries + (size_t)r0 * d, d,
                    keys, d, 0.0f, ip.data(), n);
        for (int r = 0; r < rows; ++r) top_k_into(ip.data() + (size_t)r * n, n, k, out[(size_t)(r0 + r)], scratch);
    }
    return out;
}

namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RETRO_GRAPH_AVX2 1
#endif

using SearchFn = GraphSearchStats (*)(const std::vector<std::vector<int32_t>>&, const float*, int, int, const float*,
                                      int, int, std::vector<int32_t>&, GraphSearchScratch&,
                                      std::vector<GraphSearchScratch::Cand>*, int);

// The search, inlined into one function per ISA (below). Each hop first marks and collects the
// expanded node's unvisited neighbours and prefetches their key rows and list headers, then scores and
// inserts them in list order: the same distances, insertions and result as scoring while marking, with
// the cache misses overlapped instead of serial (a graph's neighbours are scattered over the keys, and
// each list is its own allocation).
[[gnu::always_inline]] inline GraphSearchStats search_body(const std::vector<std::vector<int32_t>>& adj,
                                                           const float* keys, int d, int entry, const float* q,
                                                           int k, int L, std::vector<int32_t>& out,
                                                           GraphSearchScratch& s,
                                                           std::vector<GraphSearchScratch::Cand>* expanded,
                                                           int exclude) {
    using Cand = GraphSearchScratch::Cand;
    GraphSearchStats st;
    out.clear();
    const int n = (int)adj.size();
    if (n == 0 || k <= 0) return st;
    const size_t cap = (size_t)std::max(L, k);
    if (s.stamp.size() != (size_t)n) {
        s.stamp.assign((size_t)n, 0);
        s.gen = 0;
    }
    if (++s.gen == 0) {
        std::fill(s.stamp.begin(), s.stamp.end(), 0);
        s.gen = 1;
    }
    auto& Q = s.queue;
    Q.clear();
    const auto less = [](const Cand& a, const Cand& b) { return a.dist < b.dist || (a.dist == b.dist && a.id < b.id); };
    // Inserts c unless the queue is full of better candidates; returns its position (Q.size() if not).
    const auto insert = [&](Cand c) {
        if (Q.size() == cap && !less(c, Q.back())) return Q.size();
        const size_t pos = (size_t)(std::lower_bound(Q.begin(), Q.end(), c, less) - Q.begin());
        if (Q.size() == cap) Q.pop_back();
        Q.insert(Q.begin() + (ptrdiff_t)pos, c);
        return pos;
    };
    if (entry != exclude) {
        s.stamp[(size_t)entry] = s.gen;
        st.distance_ops += 1;
        insert({-dot_f32(q, keys + (size_t)entry * d, d), entry, false});
    }
    auto& fresh = s.fresh;
    size_t cur = 0;  // first possibly unexpanded position
    while (true) {
        while (cur < Q.size() && Q[cur].expanded) ++cur;
        if (cur >= Q.size()) break;
        Q[cur].expanded = true;
        const Cand c = Q[cur];
        if (expanded) expanded->push_back(c);
        ++st.hops;
        // The next unexpanded candidate is likely the next hop's node: its list on the way meanwhile
        // (its header was prefetched when it was queued).
        for (size_t j = cur + 1; j < Q.size(); ++j)
            if (!Q[j].expanded) {
                const auto& l = adj[(size_t)Q[j].id];
                for (size_t off = 0; off < l.size() * sizeof(int32_t); off += 64)
                    __builtin_prefetch((const char*)l.data() + off);
                break;
            }
        fresh.clear();
        for (int32_t nb : adj[(size_t)c.id]) {
            if (s.stamp[(size_t)nb] == s.gen || nb == exclude) continue;
            s.stamp[(size_t)nb] = s.gen;
            fresh.push_back(nb);
            const char* row = (const char*)(keys + (size_t)nb * d);
            for (size_t off = 0; off < (size_t)d * sizeof(float); off += 64) __builtin_prefetch(row + off);
            __builtin_prefetch(&adj[(size_t)nb]);
        }
        size_t lowest = Q.size();  // lowest position an insertion reached
        for (int32_t nb : fresh) {
            st.distance_ops += 1;
            const size_t pos = insert({-dot_f32(q, keys + (size_t)nb * d, d), nb, false});
            lowest = std::min(lowest, pos);
        }
        cur = std::min(cur, lowest);
    }
    const size_t kk = std::min(Q.size(), (size_t)k);
    out.reserve(kk);
    for (size_t i = 0; i < kk; ++i) out.push_back(Q[i].id);
    return st;
}

GraphSearchStats search_portable(const std::vector<std::vector<int32_t>>& adj, const float* keys, int d, int entry,
                                 const float* q, int k, int L, std::vector<int32_t>& out, GraphSearchScratch& s,
                                 std::vector<GraphSearchScratch::Cand>* expanded, int exclude) {
    return search_body(adj, keys, d, entry, q, k, L, out, s, expanded, exclude);
}

#ifdef RETRO_GRAPH_AVX2
// AVX2 without FMA: dot_f32's eight sums become one 8-wide register, each lane adding in the same order
// as the portable build's two 4-wide ones, so every distance — and the search — is bit-identical.
__attribute__((target("avx2"))) GraphSearchStats search_avx2(
    const std::vector<std::vector<int32_t>>& adj, const float* keys, int d, int entry, const float* q, int k, int L,
    std::vector<int32_t>& out, GraphSearchScratch& s, std::vector<GraphSearchScratch::Cand>* expanded,
    int exclude) {
    return search_body(adj, keys, d, entry, q, k, L, out, s, expanded, exclude);
}
#endif

SearchFn pick_search() {
#ifdef RETRO_GRAPH_AVX2
    if (__builtin_cpu_supports("avx2")) return search_avx2;
#endif
    return search_portable;
}

}  // namespace

GraphSearchStats graph_search(const std::vector<std::vector<int32_t>>& adj, const float* keys, int d,
                              int entry, const float* q, int k, int L, std::vector<int32_t>& out,
                              GraphSearchScratch& s, std::vector<GraphSearchScratch::Cand>* expanded,
                              int exclude) {
    static const SearchFn fn = pick_search();
    return fn(adj, keys, d, entry, q, k, L, out, s, expanded, exclude);
}

int reachable_count(const std::vector<std::vector<int32_t>>& adj, int entry) {
    if (adj.empty()) return 0;
    std::vector<char> seen(adj.size(), 0);
    std::vector<int32_t> stack{entry};
    seen[(size_t)entry] = 1;
    int cnt = 0;
    while (!stack.empty()) {
        const int32_t u = stack.back();
        stack.pop_back();
        ++cnt;
        for (int32_t v : adj[(size_t)u])
            if (!seen[(size_t)v]) {
                seen[(size_t)v] = 1;
                stack.push_back(v);
            }
    }
    return cnt;
}

RoarGraph build_roargraph(const float* keys, int n, int d, const float* queries, int m,
                          const RoarGraphParams& p) {
    check_params(n, d, m, p);
    RoarGraph g;
    g.n = n;
    g.d = d;
    Builder b(keys, n, d, p);

    // 4. Entry point: nearest (L2) key to the mean key.
    {
        std::vector<double> mean((size_t)d, 0.0);
        for (int i = 0; i < n; ++i)
            for (int e = 0; e < d; ++e) mean[(size_t)e] += keys[(size_t)i * d + e];
        double best = 1e300;
        for (int i = 0; i < n; ++i) {
            double s = 0;
            for (int e = 0; e < d; ++e) {
                const double t = keys[(size_t)i * d + e] - mean[(size_t)e] / n;
                s += t * t;
            }
            if (s < best) best = s, g.entry = i;
        }
    }

    // 1. Bipartite query -> key kNN.
    auto t0 = std::chrono::steady_clock::now();
    const auto knn = exact_mips_knn(keys, n, d, queries, m, p.nq);
    b.ops += (double)m * n;
    g.ms_knn = ms_since(t0);
    t0 = std::chrono::steady_clock::now();

    // 2. Projection.
    auto& proj = g.projection;
    proj.assign((size_t)n, {});
    for (int qi = 0; qi < m; ++qi) {
        const auto& nn = knn[(size_t)qi];
        if (nn.empty()) continue;
        const int32_t pivot = nn[0];
        std::vector<int32_t> others(nn.begin() + 1, nn.end());
        if (others.empty()) continue;
        proj[(size_t)pivot] = b.prune(pivot, b.with_dists(pivot, others), p.M, true);
        b.add_reverse(proj, pivot, p.M, p.M, true);
    }
    for (int i = 0; i < n; ++i) b.add_reverse(proj, i, p.M, p.M, true);
    for (int i = 0; i < n; ++i)
        if ((int)proj[(size_t)i].size() > p.M) proj[(size_t)i] = b.prune(i, b.with_dists(i, proj[(size_t)i]), p.M, true);

    g.ms_projection = ms_since(t0);
    t0 = std::chrono::steady_clock::now();

    // 3. Connectivity enhancement.
    g.adj = proj;
    if (p.enhance && n > 1) {
        std::vector<std::vector<int32_t>> supply = proj;
        // Each batch of enhance_batch consecutive keys (default 1: the serial order): the searches
        // (read-only over `supply`) and the prunes of their pools in parallel, one list per key; then, in
        // key order, each list replaces the key's own and gets its reverse edges. A search does not see
        // its own batch's edges, and a key's nearest keys are often its neighbours in id (topics drift
        // along a context): batches of 256 lost recall@100 0.995 -> 0.854 on the 128K synthetic head.
        // Per-thread search state and distance counts, summed at the end (whole numbers: the total does
        // not depend on the split).
        const int threads = std::max(1, p.threads > 0 ? p.threads : compute_threads());
        const int B = std::min(p.enhance_batch, n);
        std::vector<GraphSearchScratch> scratch((size_t)threads);
        std::vector<Builder> tb((size_t)threads, Builder(keys, n, d, p));
        std::vector<std::vector<int32_t>> lists((size_t)B);
        for (int i0 = 0; i0 < n; i0 += B) {
            const int i1 = std::min(n, i0 + B);
#pragma omp parallel num_threads(threads) if (threads > 1 && i1 - i0 > 1)
            {
                const int t = thread_index();
                std::vector<GraphSearchScratch::Cand> expanded;
                std::vector<int32_t> tmp;
                std::vector<Nb> pool;
#pragma omp for schedule(dynamic, 1)
                for (int i = i0; i < i1; ++i) {
                    expanded.clear();
                    const auto st = graph_search(supply, keys, d, g.entry, keys + (size_t)i * d, 1, p.build_L,
                                                 tmp, scratch[(size_t)t], &expanded, i);
                    tb[(size_t)t].ops += st.distance_ops;
                    pool.clear();
                    for (const auto& c : expanded)
                        if (c.id != i) pool.push_back({c.dist, c.id});
                    lists[(size_t)(i - i0)] = tb[(size_t)t].prune(i, pool, p.M, false, &proj[(size_t)i]);
                }
            }
            for (int i = i0; i < i1; ++i) {
                supply[(size_t)i] = std::move(lists[(size_t)(i - i0)]);
                b.add_reverse(supply, i, 2 * p.M, p.M, false);
            }
        }
        for (auto& x : tb) b.ops += x.ops;
        for (int i = 0; i < n; ++i)
            if ((int)supply[(size_t)i].size() > p.M)
                supply[(size_t)i] = b.prune(i, b.with_dists(i, supply[(size_t)i]), p.M, false, &proj[(size_t)i]);
        for (int i = 0; i < n; ++i) {
            auto& a = g.adj[(size_t)i];
            int added = 0;
            for (int32_t v : supply[(size_t)i]) {
                if (added >= 2 * p.M) break;
                if (v != i && !contains(a, v)) a.push_back(v), ++added;
            }
        }
    }

    g.ms_enhance = ms_since(t0);
    t0 = std::chrono::steady_clock::now();

    // 5. Reachability repair.
    if (p.repair && n > 1) {
        std::vector<char> seen((size_t)n, 0);
        std::vector<int32_t> stack;
        auto flood = [&](int32_t from) {
            stack.assign(1, from);
            seen[(size_t)from] = 1;
            while (!stack.empty()) {
                const int32_t u = stack.back();
                stack.pop_back();
                for (int32_t v : g.adj[(size_t)u])
                    if (!seen[(size_t)v]) seen[(size_t)v] = 1, stack.push_back(v);
            }
        };
        flood(g.entry);
        GraphSearchScratch s;
        std::vector<GraphSearchScratch::Cand> expanded;
        std::vector<int32_t> tmp;
        for (int u = 0; u < n; ++u) {
            if (seen[(size_t)u]) continue;
            expanded.clear();
            const auto st = graph_search(g.adj, keys, d, g.entry, keys + (size_t)u * d, 1, p.build_L, tmp, s,
                                         &expanded, u);
            b.ops += st.distance_ops;
            // The nearest expanded key is reachable (the search only walks reachable keys).
            int32_t best = g.entry;
            float bd = 1e30f;
            for (const auto& c : expanded)
                if (c.dist < bd) bd = c.dist, best = c.id;
            g.adj[(size_t)best].push_back(u);
            ++g.repaired;
            flood(u);
        }
    }
    g.ms_repair = ms_since(t0);
    g.build_distance_ops = b.ops;
    return g;
}

}  // namespace retro
