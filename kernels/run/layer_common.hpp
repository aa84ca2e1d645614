#pragma once
// Pieces shared by the GPU layer runs (full_layer.cpp, wave_layer.cpp): the job's shape and its checks,
// fp16 conversion of KV rows, per-step query staging and output readback. Calls only cuda_api.hpp.
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/threads.hpp"
#include "cuda_api.hpp"
#include "gpu/backend.hpp"

namespace retro::gpu_run {

/// Tokens per page of the library decode's page table (full's KV and wave's execution buffers are read in
/// place as pages: their rows per (b, KV head) are whole pages).
constexpr int kLibraryPage = 16;

struct LayerShape {
    int H = 0;        ///< KV heads in the job
    int g = 1;        ///< query heads per KV head
    int d = 0;        ///< head dim
    int B = 1;        ///< replicas
    int prompt = 0;   ///< prompt tokens
    int tokens = 0;   ///< tokens of the trace (prompt + decode steps held by the slices)
    int last = 0;     ///< last selected step
    int D = 1;        ///< distinct sequences in the batch (replica b runs sequence b % D)
    int hq() const { return H * g; }
    int bh() const { return B * H; }
    int seq(int b) const { return b % D; }  ///< replica b's sequence
    /// The head index (sequence, KV head) of pair bh = b * H + h: seq(b) * H + h, into a run's per-sequence heads
    int head_index(int bh) const { return seq(bh / H) * H + bh % H; }
    double token_bytes() const { return 2.0 * d * 2; }  ///< K + V of one token, fp16
};

/// Throws ParamError when (head_dim, group) is outside the kernels' limits: d in {64, 128, 256},
/// group 1-8 (decode_attention; the ranking and estimation kernels accept these too).
void check_gpu_shape(int head_dim, int group);

/// Checks the job (heads present and alike, steps ascending inside the slices, batch >= 1, shape; the distinct
/// sequences' heads alike too, D = min(sequences, B), and refused for a run that does not take them).
LayerShape check_job(const GpuLayerJob& job);

/// KV head h of sequence seq (0: job.heads[h], else job.more_heads[(seq - 1) * H + h]).
const HeadSlice& head_of(const GpuLayerJob& job, int seq, int h);

/// x: [n] float -> fp16 bits.
void to_half(const float* x, size_t n, uint16_t* out);

/// Rows `ids` of a head's keys and values ([*, d] float) as fp16 into k_out, v_out: [ids.size(), d].
void rows_to_half(const HeadSlice& h, const int32_t* ids, size_t count, uint16_t* k_out, uint16_t* v_out);

/// Every (replica, KV head)'s keys and values as fp16 rows [B*H, rows, d] (rows >= s.tokens; the rows past
/// the last token zeros, as a kernel may load a whole page): in device memory, or in pinned host memory
/// when `pinned` (read over PCIe). One copy per head converted once and replicated B times. A failed
/// allocation is a GpuMemoryError naming `what` and the batch.
struct LayerKv {
    cuda::DeviceBuffer<uint16_t> dk, dv;
    cuda::PinnedBuffer<uint16_t> pk, pv;  // pinned: the KV itself; else the staging of one head
    const uint16_t* K = nullptr;
    const uint16_t* V = nullptr;
};
LayerKv upload_layer_kv(const GpuLayerJob& job, const LayerShape& s, size_t rows, bool pinned, const std::string& what);

/// The queries of one step for every (replica, query head): d_q [B, H*g, d] (replicas alike).
class QueryStage {
  public:
    QueryStage(const GpuLayerJob& job, const LayerShape& s);
    /// Copies step t's queries to the device on `stream` (asynchronous from pinned memory).
    void stage(int t, void* stream);
    const float* device() const { return d_.get(); }

  private:
    const GpuLayerJob& job_;
    LayerShape s_;
    cuda::PinnedBuffer<float> h_;
    cuda::DeviceBuffer<float> d_;
};

/// Attention outputs on the device and their host copies: out [B, H*g, d], lse [B, H*g].
struct LayerOutputs {
    explicit LayerOutputs(const LayerShape& s);
    /// Queues the device -> host copies on `stream` (the caller synchronizes).
    void read_back(void* stream);
    cuda::DeviceBuffer<float> out, lse;
    cuda::PinnedBuffer<float> h_out, h_lse;
};

/// What a selecting method's step does besides select and attend (pq with its KV offloaded), each optional.
struct StepHooks {
    std::function<void()> gather;          ///< between select and attend: the chosen rows into execution buffers
    /// after select is queued, the launch gate released: host work overlapped with the GPU's select (an
    /// asynchronous cache update's apply, its copies queued before the gather); returns its host us
    std::function<double()> before_gather;
    /// after the attention, on the same stream (the cache's update, or an asynchronous one's collect: the
    /// next step waits for it, so it is admit_us); returns its host us
    std::function<double()> after_attend;
};

/// A selecting method's lists and timed step (quest, pq). Holds the page tables d_table [lists, width]
/// int32 and their lengths d_lens [lists] (what the selection writes and decode_attention_pages reads),
/// replica 0's host copies (its first lists0 lists) and the attention's workspace for `ds`. run(): on the
/// first step job.warmup untimed select (+ gather) + attend, then between CUDA events behind the launch gate
/// (job.launch_gate) select, the hooks' before_gather and gather, attend, then after_attend, replica 0's
/// lists (`table_ints` of the table, lists0 lengths) and the outputs read back, synchronized; returns step
/// t's GpuStep with n, the outputs and the times (select_us, gather_us, attend_us, step_us; admit_us =
/// after_attend's span; host_us = the hooks' host time).
class SelectAttendStep {
  public:
    SelectAttendStep(size_t lists, int width, size_t lists0, const cuda::DecodeShape& ds);
    GpuStep run(const GpuLayerJob& job, int t, int n, bool first, const std::function<void()>& select,
                const std::function<void()>& attend, size_t table_ints, LayerOutputs& o, cuda::Stream& stream,
                const StepHooks& hooks = {});
    /// The library decode's first plan before any step (its device buffers sized here, not in a timed step):
    /// every list one token long, from page 0 of the table when page_stride > 0 (the caller's page table).
    void size_library(cuda::LibraryDecode& lib, int page_stride, cuda::Stream& stream);
    int32_t* table() const { return table_.get(); }
    int32_t* lens() const { return lens_.get(); }
    float* work() const { return work_.get(); }
    const int32_t* h_table() const { return h_table_.get(); }  ///< replica 0's lists after run()
    const int32_t* h_lens() const { return h_lens_.get(); }

  private:
    size_t lists_ = 0;
    int width_ = 0;
    cuda::DeviceBuffer<int32_t> table_, lens_;
    cuda::PinnedBuffer<int32_t> h_table_, h_lens_;
    cuda::DeviceBuffer<float> work_;
    cuda::Event e0_, e1_, eg_, e2_, e3_;
    cuda::LaunchGate gate_;
};

/// The CPU method's context for KV head h: its slice's shape, fp16 storage, the seed seed(layer, kv_head)
/// (unset: 0, a test's MethodContext).
MethodContext head_context(const HeadSlice& h, const std::function<unsigned(int, int)>& seed);

/// A CPU method's JSON-free per-head cores (pq's PqHead, magicpig's MagicPigHead) for the job's KV heads of
/// its first `sequences` sequences ([sequences * H], sequence by sequence), built over the prompt as the
/// method's build() does (head_context); build_ms: their wall time. The heads are built side by side on the
/// host's cores (for_each_item: each head's build is its own, so the result is the same as one by one; in the
/// GPU-only build they are plain loops on one core each, and a batch of distinct sequences at 128K has
/// D x 8 of them).
template <class Head, class Params>
std::vector<Head> build_method_heads(const GpuLayerJob& job, const LayerShape& s, const Params& params,
                                     const std::function<unsigned(int, int)>& seed, int sequences, double& build_ms) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Head> heads;
    for (int i = 0; i < sequences * s.H; ++i) heads.emplace_back(params);
    for_each_item(sequences * s.H, 0, [&](int i) {
        const HeadSlice& h = head_of(job, i / s.H, i % s.H);
        heads[(size_t)i].build(head_context(h, seed), KVView{h.keys.data(), h.values.data(), s.prompt, s.d});
    });
    build_ms = 1e-3 * (double)std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now() - t0).count();
    return heads;
}

/// Microseconds between two recorded events.
inline double us_between(cuda::Event& a, cuda::Event& b) { return 1e3 * (double)b.ms_since(a); }

/// Host wall-clock microseconds since t0 (steady clock).
inline double us_since(std::chrono::steady_clock::time_point t0) {
    return 1e-3 * (double)std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
                      .count();
}

/// Throws GpuMemoryError "<what> at batch <batch> needs N MiB of GPU memory; M MiB free" when `need` bytes
/// exceed the device's free memory (the runner skips that batch point).
void require_device_memory(const std::string& what, int batch, size_t need);

/// Whether a selecting method's attention runs on the library decode (FlashInfer, cuda::LibraryDecode) as full
/// attention's baseline does: job.full_kernel is the library (the default; "own" keeps the project's kernel),
/// the library takes (d, group) and plan_device schedules the `requests` ((sequence, list) pairs).
bool library_takes(const GpuLayerJob& job, int d, int group, int requests);

/// Tokens per split for decode_attention: short buffers (the execution buffer) get smaller splits so
/// that B*H*splits blocks fill the GPU (~528 blocks: 4 per SM of an H100), between 64 and 512.
int decode_split(int capacity, int bh);

}  // namespace retro::gpu_run
