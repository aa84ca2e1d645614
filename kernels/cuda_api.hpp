#pragma once
// Host API of the CUDA kernels (docs/cuda.md). Plain C++: no CUDA header is needed to call it, so the
// checks, the GTest wrappers and the gpu-check driver compile with the host compiler.
//
// Conventions: every pointer argument named d_* is device memory (or, where said, pinned host memory
// read zero-copy through unified addressing); KV storage is IEEE fp16 (uint16_t bits), queries and
// outputs float32, accumulation float32. `stream` is a cudaStream_t passed as void* (nullptr = the
// default stream). Launchers never synchronize and never print; they throw retro::Error on a launch
// error or an invalid argument.
//
// GQA layout: query head qh of a batch item belongs to KV head qh / g (g = Hq / Hkv), i.e. the g query
// heads of one KV head are consecutive.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "cluster/kmeans.hpp"
#include "core/error.hpp"

namespace retro::cuda {

// ---- runtime (kernels/runtime.cpp) ----

/// True when a CUDA device can be used (cudaGetDeviceCount > 0 and a context can be made).
bool device_available();
/// "" when a device is usable, else why not (no device, driver older than the runtime, ...).
std::string device_status();
/// Name of device 0 ("" when none) and its compute capability as major*10+minor.
std::string device_name();
int device_cc();
/// FP32 FMA peak of device 0 in FLOP/s: SMs * clock * 128 lanes * 2 (the sm_80/sm_90 SM); 0 if unknown.
double device_fp32_peak();
/// The device's SM count (0 without a device); read once.
int device_sms();

void* dev_alloc(size_t bytes);                  ///< cudaMalloc; throws on failure
void dev_free(void* p);                         ///< nullptr is ignored
void* pinned_alloc(size_t bytes);               ///< cudaHostAlloc(mapped | portable)
void pinned_free(void* p);
void copy_h2d(void* d_dst, const void* src, size_t bytes);
void copy_d2h(void* dst, const void* d_src, size_t bytes);
void copy_d2d(void* d_dst, const void* d_src, size_t bytes);
void copy_h2d_async(void* d_dst, const void* src, size_t bytes, void* stream = nullptr);
/// Fills bytes with `byte` (0xFF = NaN in both fp32 and fp16: the checks' poison).
void dev_memset(void* d_dst, int byte, size_t bytes);
void synchronize();
void copy_d2h_async(void* dst, const void* d_src, size_t bytes, void* stream = nullptr);
/// `rows` rows of `width` bytes, row i from src + i*spitch to dst + i*dpitch, any direction (device or
/// pinned host pointers, unified addressing: cudaMemcpy2DAsync with cudaMemcpyDefault).
void copy_2d_async(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows,
                   void* stream = nullptr);
/// Free device memory in bytes (cudaMemGetInfo).
size_t device_free_bytes();
/// Total device memory in bytes (cudaMemGetInfo).
size_t device_total_bytes();

/// The ceilings the kernels are measured against and the cost model is calibrated by ("hardware":
/// "measured"), measured on device 0 (kernels/bench.cpp).
struct DeviceCeilings {
    double d2d_bytes_per_s = 0;         ///< cudaMemcpy device->device, (read + write) bytes / time, 1 GiB
    double h2d_pinned_bytes_per_s = 0;  ///< cudaMemcpyAsync pinned host -> device, 512 MiB
    double d2h_pinned_bytes_per_s = 0;  ///< cudaMemcpyAsync device -> pinned host, same size
    double transfer_latency_us = 0;     ///< a 4-byte pinned H2D copy, issue to completion seen by the host
    double fp32_flop_per_s = 0;         ///< SMs * clock * 128 lanes * 2 (sm_80/sm_90 FP32 FMA peak); 0 unknown
    double memory_bytes = 0;            ///< device memory (device_total_bytes)
};
/// Medians of repeated copies; quick: 256 MiB / 128 MiB buffers and 5 repetitions (about a second).
DeviceCeilings measure_ceilings(bool quick);

/// RAII CUDA stream (cudaStreamCreate); get() is what the launchers take as `stream`.
class Stream {
  public:
    Stream();
    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    void* get() const { return s_; }
    void synchronize();

  private:
    void* s_ = nullptr;
};

/// RAII CUDA event: recorded on a stream, waited on by the host, timed against another event.
class Event {
  public:
    Event();
    ~Event();
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    void record(void* stream);
    void synchronize();
    /// Milliseconds from `start` to this event (both recorded); synchronizes on this one.
    float ms_since(const Event& start);

  private:
    void* e_ = nullptr;
    double host_ms_ = 0;  ///< the CPU emulation's clock (unused by the CUDA runtime)
};

/// nvbench's blocking kernel: hold(stream) enqueues a kernel that spins until release() (a flag in mapped
/// pinned memory) or until timeout_us has passed, so the work the host enqueues behind it runs back to
/// back, without the host's launch calls between its kernels; events recorded after hold() then time the
/// GPU's work alone, as a serving engine's captured step runs it. Release before waiting on the stream
/// (the gate ends by its timeout otherwise, and timed_out() says so).
class LaunchGate {
  public:
    explicit LaunchGate(double timeout_us = 20000);
    ~LaunchGate();
    LaunchGate(const LaunchGate&) = delete;
    LaunchGate& operator=(const LaunchGate&) = delete;
    void hold(void* stream);  ///< clears the flag, then enqueues the spinning kernel on `stream`
    void release();           ///< lets the held kernel end (idempotent)
    /// Whether the last held kernel ended by its timeout rather than by release(); read it after the
    /// stream has passed the gate (a synchronize). false for a gate never held.
    bool timed_out() const;

  private:
    int32_t* flag_ = nullptr;  ///< mapped pinned [2]: release flag, timed-out flag
    double timeout_us_;
};

/// RAII device buffer of n elements of T.
template <class T>
class DeviceBuffer {
  public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t n) : n_(n), p_(static_cast<T*>(dev_alloc(n * sizeof(T) + (n == 0)))) {}
    ~DeviceBuffer() { dev_free(p_); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept : n_(o.n_), p_(o.p_) { o.p_ = nullptr, o.n_ = 0; }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        std::swap(n_, o.n_), std::swap(p_, o.p_);
        return *this;
    }
    T* get() const { return p_; }
    size_t size() const { return n_; }
    size_t bytes() const { return n_ * sizeof(T); }

  private:
    size_t n_ = 0;
    T* p_ = nullptr;
};

/// RAII pinned (page-locked, mapped) host buffer of n elements of T: readable by kernels through
/// unified addressing (zero-copy) and the source of asynchronous copies.
template <class T>
class PinnedBuffer {
  public:
    PinnedBuffer() = default;
    explicit PinnedBuffer(size_t n) : n_(n), p_(static_cast<T*>(pinned_alloc(n * sizeof(T) + (n == 0)))) {}
    ~PinnedBuffer() { pinned_free(p_); }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
    PinnedBuffer(PinnedBuffer&& o) noexcept : n_(o.n_), p_(o.p_) { o.p_ = nullptr, o.n_ = 0; }
    PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
        std::swap(n_, o.n_), std::swap(p_, o.p_);
        return *this;
    }
    T* get() const { return p_; }
    size_t size() const { return n_; }
    size_t bytes() const { return n_ * sizeof(T); }
    T& operator[](size_t i) const { return p_[i]; }

  private:
    size_t n_ = 0;
    T* p_ = nullptr;
};

/// Times GPU work between start() and stop() with CUDA events on `stream` (milliseconds).
class EventTimer {
  public:
    explicit EventTimer(void* stream = nullptr);
    ~EventTimer();
    EventTimer(const EventTimer&) = delete;
    EventTimer& operator=(const EventTimer&) = delete;
    void start();
    void stop();
    float elapsed_ms();  ///< synchronizes on the stop event

  private:
    void* stream_;
    void* a_ = nullptr;
    void* b_ = nullptr;
};

// ---- cluster scoring (kernels/attention.cu; CPU reference: lib/attention/cluster_rank) ----

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
    const char* v = std::getenv("RETRO_SELECT_HIST");
    if (v == nullptr || *v == '\0') return SelectHist::plain;
    for (const SelectHist h : kSelectHists)
        if (std::string(v) == select_hist_name(h)) return h;
    throw ParamError(std::string("RETRO_SELECT_HIST=") + v + ": expected plain, combined, adaptive or adaptive_combined");
}
/// The process's variant: host state shared by the CUDA build and the CPU emulation (which only remembers
/// it); -1 until set or first read from the environment.
inline std::atomic<int> g_select_hist{-1};
inline void set_select_histograms(SelectHist h) { g_select_hist = (int)h; }
inline SelectHist select_histograms() {
    if (g_select_hist < 0) g_select_hist = (int)select_histograms_from_env();
    return (SelectHist)g_select_hist.load();
}

/// The zones only, without ranking every cluster: for each (b, kv head) ranked[0, r) = the top r clusters
/// in cluster_rank's order and ranked[r, r + e) = the next e as a set (ascending id); the rest of the row
/// is not written. agg as cluster_rank. One block per (b, kv head) by radix select where M <= 8192 and
/// r <= 1024, else cluster_rank itself. Same workspace as cluster_rank; r + e <= M (ParamError).
void cluster_select(const ClusterScoreShape& s, int r, int e, const float* d_q, const uint16_t* d_centroids,
                    const uint8_t* d_valid, float* d_agg, int32_t* d_ranked, void* d_work, size_t work_bytes,
                    void* stream = nullptr);

// ---- estimation zone (CPU reference: lib/attention add_estimated_cluster) ----

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
    const char* v = std::getenv("RETRO_EST_WARPS");
    if (v == nullptr || *v == '\0' || std::string(v) == "auto") return EstimateWidth::automatic;
    if (std::string(v) == "4") return EstimateWidth::four;
    if (std::string(v) == "wide") return EstimateWidth::wide;
    throw ParamError(std::string("RETRO_EST_WARPS=") + v + ": expected 4, wide or auto");
}
/// The process's width, as select_histograms' variant.
inline std::atomic<int> g_estimate_width{-1};
inline void set_estimate_width(EstimateWidth w) { g_estimate_width = static_cast<int>(w); }
inline EstimateWidth estimate_width() {
    if (g_estimate_width < 0) g_estimate_width = static_cast<int>(estimate_width_from_env());
    return static_cast<EstimateWidth>(g_estimate_width.load());
}
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

// ---- execution-buffer assembly (CPU reference: copy_segments_ref in kernels/checks.cpp) ----

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
/// back). CPU reference: gather_clusters_ref in kernels/checks.cpp.
struct GatherShape {
    int bh = 1;        ///< (batch item, KV head) pairs
    int clusters = 0;  ///< M: the row stride of ranked, sizes and offsets
    int r = 0;         ///< retrieval clusters per pair (<= M, <= kMaxGatherClusters)
    int tokens = 0;    ///< N: store rows per pair (the store's row stride)
    int capacity = 0;  ///< X: execution-buffer rows per pair
    int d = 128;       ///< head dim, a multiple of 8
};
constexpr int kMaxGatherClusters = 8192;

/// For every pair p: its first r ranked clusters, in rank order, copied from the store into its execution
/// buffer after its `steady` rows (cluster c = store rows [offsets[c], offsets[c] + sizes[c]); empty
/// clusters add nothing), and lens[p] = steady + their tokens. The caller sizes X for the r largest
/// clusters (rows past X are not written; lens then says X at most).
/// d_ranked: [bh, M] int32 (cluster_select's order; the first r are read); d_sizes, d_offsets: [bh, M]
/// int32; d_store_k, d_store_v: [bh, N, d] fp16 device memory; d_xk, d_xv: [bh, X, d] fp16;
/// d_lens: [bh] int32 out. ParamError on a shape out of range.
void gather_clusters(const GatherShape& s, int steady, const int32_t* d_ranked, const int32_t* d_sizes,
                     const int32_t* d_offsets, const uint16_t* d_store_k, const uint16_t* d_store_v, uint16_t* d_xk,
                     uint16_t* d_xv, int32_t* d_lens, void* stream = nullptr);

// ---- decode attention (flash-decoding; CPU reference: lib/attention partial_attention_ids + merge) ----

struct DecodeShape {
    int batch = 1;
    int kv_heads = 1;
    int group = 1;      ///< <= 8
    int d = 128;        ///< 64, 128 or 256
    int capacity = 0;   ///< token rows per (b, kv head) in K/V (the row stride)
    int split = 512;    ///< tokens per split (one block each)
    float scale = 0;    ///< 1/sqrt(d) when 0
    int splits() const { return (capacity + split - 1) / split; }
};

/// Floats of workspace decode_attention needs: B * Hkv*g * splits * (d + 2).
size_t decode_workspace_floats(const DecodeShape& s);

/// out = attention of each query head over its KV head's first lens[b*Hkv + kvh] tokens (all capacity
/// when d_lens is null), merged by LSE with an extra partial (d_extra_out, d_extra_lse: the estimation
/// zone) when given. d_q: [B, Hkv*g, d] f32; d_k, d_v: [B*Hkv, capacity, d] fp16;
/// d_lens: [B*Hkv] int32 or null; d_extra_out: [B, Hkv*g, d] f32 or null; d_extra_lse: [B, Hkv*g] or null;
/// d_out: [B, Hkv*g, d] f32; d_lse: [B, Hkv*g] f32 or null; d_work: decode_workspace_floats(s) floats.
void decode_attention(const DecodeShape& s, const float* d_q, const uint16_t* d_k, const uint16_t* d_v,
                      const int32_t* d_lens, const float* d_extra_out, const float* d_extra_lse,
                      float* d_out, float* d_lse, float* d_work, void* stream = nullptr);

// ---- library decode attention (kernels/flashinfer_decode.cu: FlashInfer's batch decode; the baseline) ----

/// "" when this build runs FlashInfer's decode kernel for head dim d and GQA group `group`; else why not
/// (a build without the FlashInfer headers, a head dim or group size it is not built for).
std::string library_decode_unsupported(int d, int group);

/// Full attention per (batch item, KV head) by FlashInfer's batch decode kernel and its planner, over the
/// same KV layout as decode_attention, read in place as pages of `page_tokens` tokens.
/// K, V: [B*Hkv, capacity, d] fp16, capacity a multiple of page_tokens; q: [B, Hkv*g, d] f32;
/// out: [B, Hkv*g, d] f32; lse: [B, Hkv*g] f32 natural log (or null).
class LibraryDecode {
  public:
    /// Throws ParamError naming the shape when library_decode_unsupported(s.d, s.group) is not "".
    explicit LibraryDecode(const DecodeShape& s, int page_tokens = 16);
    ~LibraryDecode();
    LibraryDecode(const LibraryDecode&) = delete;
    LibraryDecode& operator=(const LibraryDecode&) = delete;
    /// Plans the split of each (b, kv head)'s h_lens[bk] visible tokens (1..capacity; h_lens: [B*Hkv]
    /// host memory) and uploads the page table on `stream`. Host work (FlashInfer's planner): call it
    /// before the timed region, once per step (a serving engine plans once per step for all layers).
    /// The previous plan's uploads must have completed (this rewrites the pinned tables they copy from):
    /// synchronize the stream between steps, as the layer runs do.
    void plan(const int32_t* h_lens, void* stream = nullptr);
    /// The lengths on the device (d_lens: [B*Hkv] int32, 1..capacity, written by an earlier kernel on
    /// `stream`): the page table and the schedule are built there by two small kernels, so nothing waits
    /// for the host (no planner, no read-back). The split is FlashInfer's planner's, computed there from
    /// the lengths: the smallest KV chunk (>= 128 tokens) whose tiles fit the kernel's grid (its
    /// occupancy x the SM count; no split when the B*Hkv requests alone fill it); max_tiles > 1 sizes the
    /// grid at B*Hkv*max_tiles instead (chunks from one page), 1 = unsplit. The launch is sized for the
    /// grid with the unused blocks masked off (FlashInfer's CUDA-graph padding) and the tiles merged by
    /// FlashInfer. At most 4096 requests. Replaces the last plan() until the next plan(); buffers are
    /// sized at the first call for a grid (call it once before timing).
    void plan_device(const int32_t* d_lens, void* stream = nullptr, int max_tiles = 0);
    /// The attention for the last plan's lengths. With d_extra_out/d_extra_lse (a second normalized
    /// state per query head, [B, Hkv*g, d] and [B, Hkv*g] natural log, -inf = empty: wave's estimation
    /// zone) the two are merged by their LSEs, as decode_attention's extra does.
    void run(const float* d_q, const uint16_t* d_k, const uint16_t* d_v, float* d_out, float* d_lse,
             void* stream = nullptr, const float* d_extra_out = nullptr, const float* d_extra_lse = nullptr);

  private:
    struct Impl;
    Impl* impl_;
};

// ---- cuDNN's fused attention (kernels/cudnn_decode.cpp: the backend PyTorch's SDPA picks on Hopper) ----

/// "" when this build and this machine run cuDNN's SDPA for head dim d and GQA group `group`; else why
/// not (a build without the cuDNN frontend headers, no loadable libcudnn.so.9 — RETRO_CUDNN_LIB names one
/// —, a shape cuDNN's fused attention does not take). Loads the library on the first call.
std::string cudnn_decode_unsupported(int d, int group);

/// Full attention per (batch item, KV head) by cuDNN's fused scaled-dot-product attention (the cuDNN
/// frontend's SDPA graph: one query token per sequence, the KV lengths as its padding mask, GQA by
/// heads), over the same KV layout as decode_attention read in place as [B, Hkv, capacity, d].
/// K, V: [B*Hkv, capacity, d] fp16; q: [B, Hkv*g, d] f32 (narrowed to fp16 for cuDNN, which takes one
/// dtype for Q, K and V); out: [B, Hkv*g, d] f32 (cuDNN's fp16 output widened); lse: [B, Hkv*g] f32
/// natural log (cuDNN's softmax stats) or null.
/// How CudnnDecode builds its graph. The defaults give the LSE and take ragged lengths; PyTorch's SDPA at
/// inference builds {stats = false, exact_len = the length}: no softmax stats, no mask, a graph per shape.
struct CudnnDecodeOptions {
    bool stats = true;  ///< the softmax stats as an output (run's d_lse); false: d_lse is left untouched
    int exact_len = 0;  ///< > 0: every sequence holds exactly this many tokens (<= capacity; no padding
                        ///< mask, run's d_lens unused); 0: d_lens as the padding mask
};

class CudnnDecode {
  public:
    /// Builds cuDNN's plan for the shape (heuristics, then the first engine that supports it; seconds,
    /// once). Throws ParamError naming the reason when cudnn_decode_unsupported(s.d, s.group) is not "",
    /// or when cuDNN refuses the graph.
    explicit CudnnDecode(const DecodeShape& s, const CudnnDecodeOptions& o = {});
    ~CudnnDecode();
    CudnnDecode(const CudnnDecode&) = delete;
    CudnnDecode& operator=(const CudnnDecode&) = delete;
    /// The attention of each batch item over its first d_lens[b] tokens (every KV head of an item the
    /// same length, as a serving engine's sequence; d_lens: [B] int32 in device memory, 1..capacity), or
    /// over exactly options.exact_len tokens when that is set (d_lens unused, may be null).
    void run(const float* d_q, const uint16_t* d_k, const uint16_t* d_v, const int32_t* d_lens, float* d_out,
             float* d_lse, void* stream = nullptr);

  private:
    struct Impl;
    Impl* impl_;
};

// ---- segmented k-means (kernels/kmeans.cu; CPU reference: lib/cluster/kmeans) ----

/// assign[i] = argmax_{j in [c_begin[seg(i)], c_end[seg(i)])} x_i . c_j (lowest j on ties), where row i
/// lies in segment seg(i) = the s with row_begin[s] <= i < row_begin[s+1], c_begin(s) =
/// cluster_begin[max(0, s - radius)] and c_end(s) = cluster_begin[min(S, s + radius + 1)]: radius 0 = own
/// segment, r = r neighbours either side, < 0 = all k centroids (kmeans_final_radius). d_x: [n, d] f32; d_c: [k, d] f32; d_row_begin, d_cluster_begin: [S + 1];
/// d_assign: [n] int32 out.
void kmeans_assign(const float* d_x, int n, int d, const float* d_c, int k, const int32_t* d_row_begin,
                   const int32_t* d_cluster_begin, int S, int radius, int32_t* d_assign,
                   void* stream = nullptr);

/// Segmented spherical k-means on the GPU with the CPU version's plan, initialisation (seed 0 only),
/// iterations and final un-normalized means: same contract as retro::segmented_kmeans. x: [n, d] host.
retro::KMeansResult segmented_kmeans_gpu(const float* x, int n, int d, const retro::KMeansParams& p);

}  // namespace retro::cuda
