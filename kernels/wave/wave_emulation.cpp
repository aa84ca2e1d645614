// Part of the CPU emulation of cuda_api.hpp (docs/cuda.md, "CPU emulation"): float32 like the kernels but
// written independently of them and of the lib/ references; "device" memory is host memory, launches queued
// on their streams (common/emulation_streams.hpp). Linked with the check bodies into retro_check_emulation
// (and with the run path into retro_backend_emulation), it tests the checks themselves (input layouts,
// references, tolerances, poisoning) on machines without a GPU. It says nothing about the CUDA kernels.
// This file: the wave step's kernels (wave_api.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "common/emulation_streams.hpp"
#include "common/emulation_trace.hpp"
#include "common/registry.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

// The emulated cluster_select and estimation have one histogram and one width: their variants
// (cuda_api.hpp's select_histograms, estimate_width) are only remembered.
size_t cluster_rank_workspace(const ClusterScoreShape&) { return 16; }
size_t estimate_workspace_floats(const ClusterScoreShape&, int) { return 4; }
static float h(uint16_t b) { return half_to_float(b); }
void cluster_rank(const ClusterScoreShape& s, const float* q, const uint16_t* c, const uint8_t* valid, float* agg,
                  int32_t* ranked, void* w, size_t wb, void* st) {
    emu::kernel("cluster_rank", s, q, c, valid, agg, ranked, w, wb);
    emu::enqueue(st, [=] {
        const float sc = s.scale ? s.scale : 1 / std::sqrt((float)s.d);
        const int M = s.clusters, g = s.group, d = s.d;
        for (int bk = 0; bk < s.batch * s.kv_heads; ++bk) {
            int b = bk / s.kv_heads, kvh = bk % s.kv_heads;
            float* a = agg + (size_t)bk * M;
            for (int j = 0; j < M; ++j) a[j] = 0;
            std::vector<float> S(M);
            for (int hh = 0; hh < g; ++hh) {
                const float* qh = q + ((size_t)b * s.kv_heads * g + kvh * g + hh) * d;
                float mx = -INFINITY;
                for (int j = 0; j < M; ++j) {
                    float acc = 0;
                    for (int e = 0; e < d; ++e) acc += qh[e] * h(c[((size_t)bk * M + j) * d + e]);
                    S[j] = (valid && !valid[(size_t)bk * M + j]) ? -INFINITY : sc * acc;
                    mx = std::max(mx, S[j]);
                }
                float sum = 0;
                for (int j = 0; j < M; ++j) sum += std::exp(S[j] - mx);
                for (int j = 0; j < M; ++j) if (S[j] != -INFINITY) a[j] += std::exp(S[j] - mx) / sum;
            }
            for (int j = 0; j < M; ++j) if (valid && !valid[(size_t)bk * M + j]) a[j] = -INFINITY;
            int32_t* r = ranked + (size_t)bk * M;
            std::iota(r, r + M, 0);
            std::stable_sort(r, r + M, [&](int x, int y) { return a[x] > a[y]; });
        }
    });
}
// the zones' contract is met by the whole ranking (the GPU's estimation zone comes in id order instead)
int select_split_active_clusters(int) { return 0; }  // no thread-block clusters here (device_cc() is 0)

void cluster_select(const ClusterScoreShape& s, int r, int e, const float* q, const uint16_t* c, const uint8_t* valid,
                    float* agg, int32_t* ranked, void* w, size_t wb, void* st) {
    emu::kernel("cluster_select", s, r, e, q, c, valid, agg, ranked, w, wb);
    const emu::Quiet quiet;
    if (r < 0 || e < 0 || r + e > s.clusters) throw ParamError("cuda cluster_select: zones larger than the clusters");
    cluster_rank(s, q, c, valid, agg, ranked, w, wb, st);  // queued on st as one launch
}
void estimate_attention(const ClusterScoreShape& s, int E, const int32_t* ids, const float* q, const uint16_t* c,
                        const uint16_t* vs, const int32_t* sizes, float* out, float* lse, float* work, void* st) {
    emu::kernel("estimate_attention", s, E, ids, q, c, vs, sizes, out, lse, work);
    emu::enqueue(st, [=] {
        const float sc = s.scale ? s.scale : 1 / std::sqrt((float)s.d);
        const int M = s.clusters, g = s.group, d = s.d;
        for (int bk = 0; bk < s.batch * s.kv_heads; ++bk) {
            int b = bk / s.kv_heads, kvh = bk % s.kv_heads;
            for (int hh = 0; hh < g; ++hh) {
                size_t qh = (size_t)b * s.kv_heads * g + kvh * g + hh;
                float m = -INFINITY, l = 0;
                std::vector<float> acc(d, 0);
                for (int t = 0; t < E; ++t) {
                    int cl = ids[(size_t)bk * E + t];
                    float n = sizes[(size_t)bk * M + cl];
                    if (n <= 0) continue;
                    float dot = 0;
                    for (int e = 0; e < d; ++e) dot += q[qh * d + e] * h(c[((size_t)bk * M + cl) * d + e]);
                    float x = sc * dot, mn = std::max(m, x), corr = std::exp(m - mn), p = std::exp(x - mn);
                    l = l * corr + n * p;
                    for (int e = 0; e < d; ++e) acc[e] = acc[e] * corr + p * h(vs[((size_t)bk * M + cl) * d + e]);
                    m = mn;
                }
                for (int e = 0; e < d; ++e) out[qh * d + e] = l > 0 ? acc[e] / l : 0;
                lse[qh] = l > 0 ? m + std::log(l) : -INFINITY;
            }
        }
    });
}
static void copy_each(const CopySegment* segs, int n, int d) {
    for (int i = 0; i < n; ++i) {
        std::memcpy(segs[i].dst_k, segs[i].src_k, segs[i].tokens * d * 2);
        std::memcpy(segs[i].dst_v, segs[i].src_v, segs[i].tokens * d * 2);
    }
}
void copy_segments(const CopySegment* segs, int n, int d, int64_t max_tokens, void* st) {
    emu::kernel("copy_segments", segs, n, d, max_tokens);
    emu::enqueue(st, [=] { copy_each(segs, n, d); });  // the descriptors are device memory: read when it runs
}
// one cudaMemcpyAsync per segment: the host reads its descriptors at the call
void copy_segments_memcpy(const CopySegment* segs, int n, int d, void* st) {
    emu::launch("copy_segments_memcpy", segs, n, d);
    std::vector<CopySegment> h(segs, segs + std::max(n, 0));
    emu::enqueue(st, [h, d] { copy_each(h.data(), (int)h.size(), d); });
}
void gather_clusters(const GatherShape& s, int steady, const int32_t* ranked, const int32_t* sizes,
                     const int32_t* offsets, const uint16_t* sk, const uint16_t* sv, uint16_t* xk, uint16_t* xv,
                     int32_t* lens, void* st, const GatherCache* cache_arg) {
    emu::kernel("gather_clusters", s, steady, ranked, sizes, offsets, sk, sv, xk, xv, lens,
                cache_arg ? *cache_arg : GatherCache{});
    if (s.d % 8 || s.r < 0 || s.r > s.clusters || s.r > kMaxGatherClusters || steady < 0 || steady > s.capacity)
        throw ParamError("cuda gather_clusters: bad shape");
    if (cache_arg && (!cache_arg->first || !cache_arg->blocks || !cache_arg->miss_rows || cache_arg->block_tokens < 1 ||
                      (cache_arg->pool_rows > 0 && (!cache_arg->pool_k || !cache_arg->pool_v))))
        throw ParamError("cuda gather_clusters: a cache view without its tables, pool or miss rows");
    const bool cached = cache_arg != nullptr;
    const GatherCache view = cached ? *cache_arg : GatherCache{};  // a kernel parameter: copied at the launch
    emu::enqueue(st, [=]() mutable {
        const GatherCache* cache = cached ? &view : nullptr;
        if (s.steady_at) steady = std::min(std::max(*s.steady_at, 0), s.capacity);  // as the kernel reads it
        const size_t d = (size_t)s.d;
        for (int p = 0; p < s.bh; ++p) {
            int64_t row = steady;
            for (int i = 0; i < s.r; ++i) {
                const size_t at = (size_t)p * s.clusters;
                const int c = ranked[at + i];
                const int64_t n = std::min<int64_t>(sizes[at + c], s.capacity - row);
                const int32_t* bl = cache ? cache->blocks + (size_t)p * cache->nb + cache->first[at + c] : nullptr;
                const bool hit = cache && sizes[at + c] > 0 && bl[0] >= 0;
                if (cache)
                    cache->miss_rows[(size_t)p * s.r + i] = !hit && sizes[at + c] > 0 && row < s.capacity ? (int32_t)row : -1;
                for (int64_t w = 0; w < n; ++w) {  // row by row: a hit's rows lie in its pool blocks
                    const size_t dst = ((size_t)p * s.capacity + row + w) * d;
                    const uint16_t *fk, *fv;
                    if (hit) {
                        const int bt = cache->block_tokens;
                        const size_t src = ((size_t)p * cache->pool_rows + (size_t)bl[w / bt] * bt + w % bt) * d;
                        fk = cache->pool_k + src, fv = cache->pool_v + src;
                    } else {
                        const size_t src = ((size_t)p * s.tokens + offsets[at + c] + w) * d;
                        fk = sk + src, fv = sv + src;
                    }
                    std::memcpy(xk + dst, fk, d * 2);
                    std::memcpy(xv + dst, fv, d * 2);
                }
                row += sizes[at + c];
            }
            lens[p] = (int32_t)std::min<int64_t>(row, s.capacity);
        }
    });
}

void set_entries(const int64_t* at, const int32_t* value, int n, int32_t* table, void* st) {
    if (n < 0) throw ParamError("cuda set_entries: n < 0");
    emu::kernel("set_entries", at, value, n, table);
    emu::enqueue(st, [=] {
        for (int i = 0; i < n; ++i) table[at[i]] = value[i];
    });
}

RETRO_KERNEL_EMULATION(wave);

}  // namespace retro::cuda
