#pragma once
// Host API of the wave decode step's kernels (kernels/cuda_api.hpp, docs/cuda.md): cluster ranking and
// the zones' selection (wave/cluster_rank.cu), the estimation zone (wave/estimate.cu) and the execution
// buffers' assembly (wave/gather.cu). CPU emulation: wave/wave_emulation.cpp; checks:
// wave/wave_checks.cpp; microbenchmarks: wave/wave_bench.cpp.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <string>

#include "core/error.hpp"

namespace retro::cuda {

// ---- the kernels' variants, chosen per process (select_histograms, select_split, estimate_width) ----

/// The variant environment variable `var` names: unset or empty gives `unset`; name(x) for one of
/// `variants` gives x; any other value a ParamError "VAR=value: expected a, b or c".
template <class E, class Variants, class Name>
E variant_from_env(const char* var, E unset, const Variants& variants, Name name) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') return unset;
    std::string expected;
    const size_t n = std::size(variants);
    size_t i = 0;
    for (const E x : variants) {
        if (std::string(v) == name(x)) return x;
        if (i > 0) expected += i + 1 == n ? " or " : ", ";
        expected += name(x);
        ++i;
    }
    throw ParamError(std::string(var) + "=" + v + ": expected " + expected);
}
/// The process's variant held in `slot` (host state shared by the CUDA build and the CPU emulation, which
/// only remembers it; -1 until set or first read): from_env() on the first read.
template <class E>
E process_variant(std::atomic<int>& slot, E (*from_env)()) {
    if (slot < 0) slot = static_cast<int>(from_env());
    return static_cast<E>(slot.load());
}

// ---- cluster scoring (wave/cluster_rank.cu; CPU reference: lib/attention/cluster_rank) ----

struct ClusterScoreShape {
    int batch = 1;     ///< B
    int kv_heads = 1;  ///< Hkv
    int group = 1;     ///< g query heads per KV head (<= 8)
    int clusters = 0;  ///< M clusters per (batch, KV head)
    int d = 128;       ///< head dim, multiple of 32, <= 256
    float scale = 0;   ///< score scale (1/sqrt(d) when 0)
};

/// Bytes of device scratch cluster_rank needs (scores and the segmented sort's temporaries).
size_t cluster_rank_workspace(const ClusterScoreShape& s);

/// Ranks the clusters of every (b, kv head): agg[j] = sum over the group's g heads of
/// softmax_j(scale * q_h . c_j) over the valid clusters; ranked = cluster ids by agg descending, ties by
/// lower id (invalid clusters last). The caller takes the first r (retrieval) and next e (estimation).
/// d_q: [B, Hkv*g, d] f32; d_centroids: [B*Hkv, M, d] fp16; d_valid: [B*Hkv, M] uint8 (nullptr = all);
/// d_agg: [B*Hkv, M] f32 out (invalid = -inf); d_ranked: [B*Hkv, M] int32 out;
/// d_work: cluster_rank_workspace(s) bytes.
void cluster_rank(const ClusterScoreShape& s, const float* d_q, const uint16_t* d_centroids,
                  const uint8_t* d_valid, float* d_agg, int32_t* d_ranked, void* d_work, size_t work_bytes,
                  void* stream = nullptr);

/// cluster_select's radix-select histograms (every variant selects the same zones; they differ in how the
/// block counts digits): plain (the default): shared atomics per item over 8-bit digits from bit 31;
/// combined: the two selections share one histogram while their prefixes agree and each thread adds a run
/// of equal digits once; adaptive: one block reduction of the valid keys' range first, the passes start at
/// its highest differing bit (the aggregates' keys share their top bits: from bit 31 the first pass fills
/// a handful of bins and the atomics serialize on them); adaptive_combined: both. The process default
/// comes from RETRO_SELECT_HIST=plain|combined|adaptive|adaptive_combined on first use (any other value:
/// ParamError); the check ClusterSelect runs every variant, the wave_step microbenchmark times each.
enum class SelectHist { plain, combined, adaptive, adaptive_combined };
inline constexpr SelectHist kSelectHists[] = {SelectHist::plain, SelectHist::combined, SelectHist::adaptive,
                                              SelectHist::adaptive_combined};
inline const char* select_hist_name(SelectHist h) {
    switch (h) {
        case SelectHist::combined: return "combined";
        case SelectHist::adaptive: return "adaptive";
        case SelectHist::adaptive_combined: return "adaptive_combined";
        default: return "plain";
    }
}
/// RETRO_SELECT_HIST's variant (unset or empty: plain; an unknown name: ParamError naming the four).
inline SelectHist select_histograms_from_env() {
    return variant_from_env("RETRO_SELECT_HIST", SelectHist::plain, kSelectHists, select_hist_name);
}
/// The process's variant: host state shared by the CUDA build and the CPU emulation (which only remembers
/// it); -1 until set or first read from the environment.
inline std::atomic<int> g_select_hist{-1};
inline void set_select_histograms(SelectHist h) { g_select_hist = (int)h; }
inline SelectHist select_histograms() { return process_variant(g_select_hist, select_histograms_from_env); }

/// cluster_select split over several blocks per (b, kv head) (issue 40 #6, batch 1): off: one block of
/// 1,024 threads per (b, kv head), the histogram variant above; on: a thread-block cluster of
/// kSelectSplitBlocks blocks per (b, kv head) (sm_90's distributed shared memory: the blocks' histograms,
/// maxima and partial sums read from each other's shared memory), one cluster per thread, the plain
/// histograms; the same aggregates bit for bit (the one-block kernel's order of additions kept: each of
/// its threads' sums, its warps' butterflies, its warps' partials in order) and so the same zones;
/// automatic: on where the clusters' blocks fit the GPU at once (B * Hkv * kSelectSplitBlocks <= its SMs:
/// batch 1's few (b, kv head)s, whose 8 blocks of 1,024 threads left 124 of the H200's 132 SMs idle, at
/// 2.5% SM throughput, 32.5 us at 128K: docs/performance.md, "Fifth lease"). Devices below sm_90, M past
/// 8,192 or r past 1,024 take the unsplit path. The process default comes from
/// RETRO_SELECT_SPLIT=off|on|auto on first use (unset: off until a lease measures it; any other value:
/// ParamError); the check ClusterSelect runs it against cluster_rank, the wave_step microbenchmark times
/// it beside the unsplit kernel.
enum class SelectSplit { off, on, automatic };
inline constexpr SelectSplit kSelectSplits[] = {SelectSplit::off, SelectSplit::on, SelectSplit::automatic};
inline constexpr int kSelectSplitBlocks = 8;  ///< blocks per (b, kv head): the portable cluster size
inline const char* select_split_name(SelectSplit v) {
    return v == SelectSplit::on ? "on" : v == SelectSplit::automatic ? "auto" : "off";
}
/// RETRO_SELECT_SPLIT's mode (unset or empty: off; an unknown name: ParamError naming the three).
inline SelectSplit select_split_from_env() {
    return variant_from_env("RETRO_SELECT_SPLIT", SelectSplit::off, kSelectSplits, select_split_name);
}
/// The process's mode, as select_histograms' variant.
inline std::atomic<int> g_select_split{-1};
inline void set_select_split(SelectSplit m) { g_select_split = static_cast<int>(m); }
inline SelectSplit select_split() { return process_variant(g_select_split, select_split_from_env); }
/// Whether cluster_select of `pairs` (b, kv head)s takes the split under mode m on a device of compute
/// capability `cc` (major * 10 + minor) that runs `active` clusters of kSelectSplitBlocks blocks at once
/// (cudaOccupancyMaxActiveClusters for the split kernel: the GPCs' shapes decide, not the SM count alone;
/// asked only under auto on sm_90; the caller has checked M <= 8192, r <= 1024). auto splits where every
/// pair's cluster runs in one wave.
inline bool select_split_for(SelectSplit m, long long pairs, int cc, int active) {
    if (m == SelectSplit::off || cc < 90) return false;
    return m == SelectSplit::on || pairs <= active;
}
/// The split kernel's clusters the device runs at once for M clusters per (b, kv head) (M <= 4096 and M <=
/// 8192 are two kernels): what auto compares B * Hkv with; 0 below sm_90 or without a device (the emulation).
int select_split_active_clusters(int clusters);

/// The zones only, without ranking every cluster: for each (b, kv head) ranked[0, r) = the top r clusters
/// in cluster_rank's order and ranked[r, r + e) = the next e as a set (ascending id); the rest of the row
/// is not written. agg as cluster_rank. One block per (b, kv head) by radix select where M <= 8192 and
/// r <= 1024 (or a cluster of blocks: select_split), else cluster_rank itself. Same workspace as
/// cluster_rank; r + e <= M (ParamError).
void cluster_select(const ClusterScoreShape& s, int r, int e, const float* d_q, const uint16_t* d_centroids,
                    const uint8_t* d_valid, float* d_agg, int32_t* d_ranked, void* d_work, size_t work_bytes,
                    void* stream = nullptr);

// ---- estimation zone (wave/estimate.cu; CPU reference: lib/attention add_estimated_cluster) ----

/// estimate_attention's block width. four: 4 warps of 16 clusters each per 64-cluster chunk; wide: 16
/// warps of 4 clusters (8 or 4 where their states would pass 32 KB of shared memory: g = 8 with d = 128,
/// d = 256): the same chunks and output, 4x the warps per SM to hide each warp's serial online-softmax
/// chain; automatic (the default): wide where the launch has at most two blocks per SM (batch 1's few
/// (b, kv head)s), else four. Why: on the H200 the wide blocks were faster at batch 1 (estimation 20.5 ->
/// 14.8 us at 32K, 29.0 -> 23.4 at 128K: 64 and 240 blocks on 132 SMs) and slower at batch 8 (32K 20.3 ->
/// 22.9, 128K 71.4 -> 79.2: 512 and 1,920 blocks), side by side in one run (docs/performance.md, "Fifth
/// lease"). The process default comes from RETRO_EST_WARPS=4|wide|auto on first use (any other value:
/// ParamError); the check EstimateAttention runs both widths.
enum class EstimateWidth { four, wide, automatic };
inline EstimateWidth estimate_width_from_env() {
    constexpr EstimateWidth widths[] = {EstimateWidth::four, EstimateWidth::wide, EstimateWidth::automatic};
    return variant_from_env("RETRO_EST_WARPS", EstimateWidth::automatic, widths, [](EstimateWidth w) {
        return w == EstimateWidth::four ? "4" : w == EstimateWidth::wide ? "wide" : "auto";  // (the rows say 4warps)
    });
}
/// The process's width, as select_histograms' variant.
inline std::atomic<int> g_estimate_width{-1};
inline void set_estimate_width(EstimateWidth w) { g_estimate_width = static_cast<int>(w); }
inline EstimateWidth estimate_width() { return process_variant(g_estimate_width, estimate_width_from_env); }
/// Whether a launch of `blocks` blocks on `sms` SMs takes the wide blocks under width w.
inline bool estimate_wide_for(EstimateWidth w, long long blocks, int sms) {
    return w == EstimateWidth::wide || (w == EstimateWidth::automatic && blocks <= 2LL * sms);
}
inline const char* estimate_width_name(EstimateWidth w) {
    return w == EstimateWidth::four ? "4warps" : w == EstimateWidth::wide ? "wide" : "auto";
}

/// Floats of workspace estimate_attention needs for E clusters: B * Hkv*g * ceil(E / 64) * (d + 2).
size_t estimate_workspace_floats(const ClusterScoreShape& s, int E);

/// Estimated attention over E clusters per (b, kv head) (RetroInfer Eq. 2-4): each cluster counts
/// size_j times with score scale * q.c_j and value vsum_j / size_j. Writes out = acc / l and
/// lse = m + log l per query head (out 0 and lse -inf when E = 0 or all sizes are 0). Parallel over
/// chunks of 64 clusters and (b, kv head)s; the chunks' states are merged by LSE.
/// d_ids: [B*Hkv, E] int32 cluster ids (< M); d_centroids, d_vsums: [B*Hkv, M, d] fp16;
/// d_sizes: [B*Hkv, M] int32; d_q: [B, Hkv*g, d] f32; d_out: [B, Hkv*g, d] f32; d_lse: [B, Hkv*g] f32;
/// d_work: estimate_workspace_floats(s, E) floats.
void estimate_attention(const ClusterScoreShape& s, int E, const int32_t* d_ids, const float* d_q,
                        const uint16_t* d_centroids, const uint16_t* d_vsums, const int32_t* d_sizes,
                        float* d_out, float* d_lse, float* d_work, void* stream = nullptr);

// ---- execution-buffer assembly (wave/gather.cu; CPU reference: host copies in wave/wave_checks.cpp) ----

/// One contiguous run of tokens copied from (src_k, src_v) to (dst_k, dst_v); each token is d fp16.
/// Sources may be device memory or pinned host memory (zero-copy reads through UVA); destinations are
/// device memory. Pointers must be 16-byte aligned and d a multiple of 8.
struct CopySegment {
    const uint16_t* src_k = nullptr;
    const uint16_t* src_v = nullptr;
    uint16_t* dst_k = nullptr;
    uint16_t* dst_v = nullptr;
    int64_t tokens = 0;
};

/// Copies every segment with one kernel (one block per 64 tokens of a segment).
/// d_segs: [n] in device memory; max_tokens >= the longest segment's tokens (sizes the grid).
/// Used for the execution buffer (steady zone + GPU block-cache blocks + zero-copy CPU blocks) and for
/// the cache admission scatter (execution buffer -> cache slots).
void copy_segments(const CopySegment* d_segs, int n, int d, int64_t max_tokens, void* stream = nullptr);

/// The comparison variant: one cudaMemcpyAsync per segment and tensor. h_segs: [n] in host memory.
void copy_segments_memcpy(const CopySegment* h_segs, int n, int d, void* stream = nullptr);

/// The execution buffers' retrieval rows assembled on the device alone (wave with its KV in device
/// memory: nothing for the host to look up, so no ranked ids go to the host and no copy list comes
/// back). CPU reference: gather_clusters_ref in wave/wave_checks.cpp.
struct GatherShape {
    int bh = 1;        ///< (batch item, KV head) pairs
    int clusters = 0;  ///< M: the row stride of ranked, sizes and offsets
    int r = 0;         ///< retrieval clusters per pair (<= M, <= kMaxGatherClusters)
    int tokens = 0;    ///< N: store rows per pair (the store's row stride)
    int capacity = 0;  ///< X: execution-buffer rows per pair
    int d = 128;       ///< head dim, a multiple of 8
    /// when set: the steady rows' count read here (device memory, one int32, <= capacity) instead of the
    /// call's `steady` (then ignored), so a captured launch (StepGraph) stays right as the steady zone grows
    const int32_t* steady_at = nullptr;
};
constexpr int kMaxGatherClusters = 8192;

/// For every pair p: its first r ranked clusters, in rank order, copied from the store into its execution
/// buffer after its `steady` rows (cluster c = store rows [offsets[c], offsets[c] + sizes[c]); empty
/// clusters add nothing), and lens[p] = steady + their tokens. The caller sizes X for the r largest
/// clusters (rows past X are not written; lens then says X at most).
/// d_ranked: [bh, M] int32 (cluster_select's order; the first r are read); d_sizes, d_offsets: [bh, M]
/// int32; d_store_k, d_store_v: [bh, N, d] fp16 device memory; d_xk, d_xv: [bh, X, d] fp16;
/// d_lens: [bh] int32 out. ParamError on a shape out of range.
/// With `cache` (the GPU block cache's view, GatherCache) a ranked cluster resident in the cache is copied
/// from its pool blocks and one that is not from the store, which may then be pinned host memory read
/// through UVA (zero-copy over PCIe: wave's KV offloaded, the device path of issue 40 #2); the misses' rows
/// are reported for the host's admission after the step.
struct GatherCache {
    /// [bh, M] int32: cluster c's first entry in `blocks` (its blocks at [first[c], first[c] + ceil(size/bt)))
    const int32_t* first = nullptr;
    /// [bh, nb] int32: the pool block holding each cluster block, -1 when the cluster is not resident (all of
    /// a cluster's blocks or none)
    const int32_t* blocks = nullptr;
    int nb = 0;            ///< entries of `blocks` per pair
    int block_tokens = 8;  ///< bt: rows per pool block
    const uint16_t* pool_k = nullptr;  ///< [bh, pool_rows, d] fp16 device memory: block b = rows [b*bt, (b+1)*bt)
    const uint16_t* pool_v = nullptr;
    int64_t pool_rows = 0;
    /// [bh, r] int32 out: the execution-buffer row where each ranked cluster that missed starts; -1 for a hit,
    /// an empty cluster or one past the capacity
    int32_t* miss_rows = nullptr;
};

void gather_clusters(const GatherShape& s, int steady, const int32_t* d_ranked, const int32_t* d_sizes,
                     const int32_t* d_offsets, const uint16_t* d_store_k, const uint16_t* d_store_v, uint16_t* d_xk,
                     uint16_t* d_xv, int32_t* d_lens, void* stream = nullptr, const GatherCache* cache = nullptr);

/// table[at[i]] = value[i] for i in [0, n) (the GPU block cache's table updates after an admission: a few
/// hundred scattered entries, one launch). d_at: [n] int64, d_value: [n] int32 in device memory; the `at`
/// are distinct. CPU reference: the loop itself (wave/wave_checks.cpp, SetEntries).
void set_entries(const int64_t* d_at, const int32_t* d_value, int n, int32_t* d_table, void* stream = nullptr);

}  // namespace retro::cuda
