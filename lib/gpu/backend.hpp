#pragma once
// The contract between the runner and the CUDA backend (docs/cuda.md, "retro-bench run on the GPU").
// The runner (lib/bench) hands a backend one layer of a trace at a time; the backend (kernels/run, which
// calls only the kernel host API kernels/cuda_api.hpp) runs the method over every KV head of the layer
// for a batch of B replicas of the request and reports, per selected decode step, the outputs, the wave
// selections, the measured phase times and the work it did. The runner computes every metric from these
// with the harness's evaluator. JSON-free: the RETRO_GPU_ONLY driver uses the same types.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "gpu/measured.hpp"
#include "methods/magicpig_head.hpp"
#include "methods/method.hpp"
#include "methods/pq_head.hpp"
#include "methods/wave_head.hpp"
#include "system/block_cache.hpp"
#include "trace/trace.hpp"

namespace retro {

/// The kernel that computes full attention (method "full"): the field's library (FlashInfer's batch
/// decode, kernels/library/flashinfer_decode.cu: the baseline), cuDNN's fused attention (kernels/library/cudnn_decode.cpp:
/// what PyTorch's SDPA runs on Hopper, the fastest decode on the H200) or the project's own
/// flash-decoding kernel (decode_attention: the readable reference, reported beside them).
enum class FullKernel { library, own, cudnn };

/// The wave indexes of a layer's KV heads built over the prompt ([H], in the job's head order), to be
/// shared by several runs of the same layer (the batch points): the index does not depend on the batch.
/// An index built once for a layer and shared by its runs at other batch sizes and placements
/// (GpuMethodInfo::shared_build; GpuBackend::build_index -> GpuLayerJob::built): wave's heads with their
/// wave indexes, or pq's with their quantizers and the prompt's codes. A run copies the heads it is given
/// (it appends the decode tokens to them).
struct BuiltIndex {
    std::vector<WaveHead> wave;  ///< [H] wave
    std::vector<PqHead> pq;      ///< [H] pq
    /// [sequences * H] the CPU-index methods' instances (faiss_*, retrieval_attention) built over the prompt;
    /// a run's replicas are copies of them (Method::clone_built: each request keeps its own index)
    std::vector<std::shared_ptr<const Method>> host;
    double build_ms = 0;         ///< wall time of building them (reported as each run's index_build_ms)
};

/// Quest's parameters on the GPU (the method `quest`, lib/methods/quest.cpp; docs/methods/quest.md).
struct QuestGpuParams {
    double k = 2048;        ///< token budget: >= 1 tokens, in (0, 1) a fraction of the visible tokens
    int page_size = 16;     ///< tokens per page
    bool per_head = true;   ///< gqa "per_head": a page list per query head; false ("max"): one per KV head
    int dense_layers = 0;   ///< layers below it attend every page
};

/// PQCache's parameters on the GPU (the method `pq`, lib/methods/pq.cpp; docs/methods/pq.md "On the GPU").
struct PqGpuParams {
    PqHeadParams head;  ///< k, m, nbits, iters, sink, window, gqa (max, mean or per_head on the GPU)
    /// The CPU method's build seed of a (layer, KV head) (the runner's method_seed): the codebooks'
    /// k-means draws from seed + 1 as the CPU method's do; unset: 0 (a test's MethodContext).
    std::function<unsigned(int layer, int kv_head)> seed;
};

/// MagicPIG's parameters on the GPU (the method `magicpig`, lib/methods/magicpig.cpp; docs/methods/magicpig.md
/// "On the GPU").
struct MagicPigGpuParams {
    MagicPigHeadParams head;  ///< K, L, seed, min_collisions, sink, window
    /// The CPU method's build seed of a (layer, KV head) (the runner's method_seed), mixed into the
    /// hyperplanes' seed as the CPU method's build does; unset: 0 (a test's MethodContext).
    std::function<unsigned(int layer, int kv_head)> seed;
};

/// The CPU-index methods on the GPU footing (faiss_flat, faiss_ivf, faiss_hnsw, retrieval_attention:
/// docs/cuda.md "The CPU-index methods on the GPU"): the static pattern's KV (sink + window + decode
/// tokens) in device memory and attended there; the index, its search and the retrieved tokens' attention
/// on the host's cores, by the CPU method's own code (RetrievalAttention's split).
struct HostIndexGpuParams {
    /// An unbuilt instance of the CPU method with the run's parameters (the registry's make).
    std::function<std::unique_ptr<Method>()> make;
    int sink = 128;    ///< the static pattern: the first `sink` tokens ...
    int window = 512;  ///< ... and the last `window` prompt tokens, and every decode token, on the GPU
    /// Decode tokens leaving the window move to the CPU index (FAISS's decode_tokens "index"): the GPU's
    /// part at n visible tokens is the sink and [max(prompt - window, n - window), n); false: every decode
    /// token stays on the GPU (RetrievalAttention; FAISS's "static").
    bool window_slides = false;
    /// The CPU method's build seed of a (layer, KV head) (the runner's method_seed); unset: 0.
    std::function<unsigned(int layer, int kv_head)> seed;
};

/// One layer of one trace on the GPU.
struct GpuLayerJob {
    /// The method, by its registry name: a GPU twin of gpu/gpu_methods.hpp ("full", "wave", "quest", "pq",
    /// "magicpig", "faiss_flat", "faiss_ivf", "faiss_hnsw", "retrieval_attention").
    std::string method = "full";
    std::vector<const HeadSlice*> heads;  ///< [H] KV heads of one layer: same head_dim, group, lengths
    std::vector<int> steps;               ///< decode steps evaluated, ascending (the others only append)
    int batch = 1;                        ///< B replicas of the request, each with its own KV copy
    /// Batches of distinct sequences (issue 40 #1): the KV heads of sequences 1..D-1, [(D-1) * H], each group of
    /// H alike job.heads in shape (another request's, or another layer's, slices). Replica b runs sequence
    /// b % D (sequence 0: job.heads, the one the harness evaluates); empty: every replica a copy of job.heads.
    /// Every GPU twin takes it.
    std::vector<const HeadSlice*> more_heads;
    /// The sequences the job gives: 1 + more_heads / H (a run uses min(that, batch) of them).
    int sequences() const { return heads.empty() ? 1 : 1 + (int)(more_heads.size() / heads.size()); }
    bool offloaded = false;               ///< full: KV in pinned host memory, read over PCIe every step
    /// wave, pq (the methods with GpuMethodInfo::kv_axis): the KV in device memory (the within-GPU-memory
    /// setting: wave's misses are device copies, pq reads its chosen tokens in place) instead of pinned host
    /// memory read over PCIe through the GPU block cache (the papers' offloaded setting, the default)
    bool kv_on_gpu = false;
    /// wave: the execution buffers assembled on the device from the ranked ids (gather_clusters, lengths on
    /// the device, FlashInfer unsplit: nothing on the host's critical path; with the KV in pinned host memory
    /// through the GPU block cache's table on the device, hits from the pool and misses zero-copy, the cache's
    /// update after the attention) instead of the host's cache lookups and copy lists (false: the paper's
    /// host path, measured beside)
    bool wave_device_gather = true;
    /// wave (with wave_device_gather) and pq with their KV in host memory: the GPU block cache's update of a
    /// step (the host's policy step, the admission copies, the table's changes) applied at the next step while
    /// the GPU ranks (and estimates), instead of after the step's attention (admit_us): RetroInfer's
    /// asynchronous cache update (its Figure 15's third bar), PQCache's asynchronous cache update (§3.4)
    bool async_update = false;
    int host_threads = 0;  ///< wave: host lookup workers (0: min(8, cores - 1); 1: the caller alone); magicpig, the CPU-index methods: host workers (0: cores - 1)
    FullKernel full_kernel = FullKernel::library;  ///< full: the library baseline or the own kernel
    WaveParams wave;                      ///< wave: index and zones (gqa must be sum)
    QuestGpuParams quest;                 ///< quest: budget, page size, GQA; the KV in device memory
    PqGpuParams pq;                       ///< pq: quantizer, budget, layout, GQA
    MagicPigGpuParams magicpig;           ///< magicpig: hashing and layout; static KV on the GPU, the rest on the host
    HostIndexGpuParams host_index;        ///< faiss_*, retrieval_attention: the CPU method; static KV on the GPU
    bool kmeans_on_gpu = false;           ///< wave: index blocks clustered by segmented_kmeans_gpu
    CacheParams cache;                    ///< wave, pq: GPU block cache per (sequence, KV head); 0 slots = none
    int block_tokens = 8;                 ///< wave, pq: cache block in tokens (cache_block_tokens)
    /// pq with its KV in host memory: tokens per transfer unit of the block cache (system.token_block;
    /// PQCache's 128), a multiple of block_tokens when the cache has room
    int unit_tokens = 1;
    int warmup = 1;                       ///< untimed runs of the first selected step's kernels
    /// Each timed step behind a launch gate (nvbench's blocking kernel, cuda_api.hpp LaunchGate): its
    /// launches are queued before the GPU starts it, so the events time the GPU's work and not the host's
    /// launch calls (at batch 1 a step's kernels are shorter than the calls); false: as one host thread
    /// issues it, the launch calls inside the timing. Host work the step waits for (wave's lookups)
    /// stays inside either way: the gate is released before any wait.
    bool launch_gate = true;
    /// The methods with GpuMethodInfo::step_graph (full; wave on its device path without the asynchronous
    /// update): each timed step's GPU work launched as one CUDA graph (cuda::StepGraph), captured again when
    /// what its launches take changes (wave: the index's growth; the zones' sizes) and replayed otherwise
    /// (issue 40 #6: a batch-1 step is ~12 dependent kernels). The phases inside a graph are not timed
    /// (select_us, estimate_us, gather_us 0; attend_us = step_us); graph_us says what capturing cost the host.
    /// full's FlashInfer plans on the device inside the graph (plan_device), as wave's attention does.
    bool step_graph = false;
    /// wave, pq: the heads built already (GpuBackend::build_index for this job's heads, params and
    /// k-means), copied by the run instead of built again; nullptr = the run builds them.
    const BuiltIndex* built = nullptr;
};

/// Phase times of one layer step for the whole batch, microseconds, from CUDA events on the method's
/// stream (host_us: host wall clock). step_us spans the first kernel's start to attention's end,
/// including the host's mapping-table lookup the GPU waits for.
struct GpuStepTimes {
    double select_us = 0;    ///< cluster_rank (the ranking)
    double estimate_us = 0;  ///< estimate_attention (with select_us: the cost model's select_us)
    double gather_us = 0;    ///< execution-buffer assembly: steady zone, cache hits, misses over PCIe
    double attend_us = 0;    ///< decode_attention with the estimation merge (full: all of the step)
    double step_us = 0;      ///< the layer step on the critical path
    double host_us = 0;      ///< host: ranked ids -> cache lookup -> copy segments (-> library plan); 0 on the device path
    double plan_us = 0;      ///< of host_us: the library decode's planning of the execution buffers
    double admit_us = 0;     ///< cache admission scatter, after the step, on the same stream
    /// job.step_graph: host time this step spent capturing and instantiating the step's graph (0 on a replay;
    /// behind the launch gate the GPU waits for it outside step_us, as for any launch call)
    double graph_us = 0;

    /// job.launch_gate: whether the gate ended by its timeout (the host took longer than it to issue the
    /// step) rather than by release, so the step's times include the host's launch calls after all
    bool gate_timed_out = false;
    /// The step's time under the one timing rule (issue 40 #1): everything the step causes before the next
    /// step can start. The admission scatter runs on the method's stream after attention, so the next step
    /// queues behind it: it counts, until an asynchronous admission that a timeline shows overlapping
    /// moves it off the stream.
    double total_us() const { return step_us + admit_us; }
};

/// Work of one layer step for ONE sequence (replica 0), summed over the layer's KV heads, in what the
/// GPU actually read and moved (fp16 KV): the cost model's LayerWork inputs.
struct GpuStepWork {
    double attend_bytes = 0;  ///< K+V bytes read by decode attention
    double index_bytes = 0;   ///< centroids read by the ranking, centroids + value sums by the estimation
    double h2d_bytes = 0;     ///< KV bytes read from pinned host memory (cache misses; offloaded full: all)
    double d2h_bytes = 0;     ///< ranked cluster ids read back by the host
    double lookups = 0;       ///< clusters looked up in the host's mapping table
};

struct GpuStep {
    int step = 0;  ///< decode step t
    int n = 0;     ///< visible tokens
    /// wave, quest: replica 0's selection per KV head [H] (valid during the callback); full: empty (the
    /// selection is every visible token: the method's own).
    std::vector<Selection> selections;
    std::vector<Footprint> footprints;  ///< wave, quest: [H] the method's memory per KV head (full: empty)
    const float* out = nullptr;  ///< [B, H*g, d] attention outputs
    const float* lse = nullptr;  ///< [B, H*g] their log-sum-exp (-inf = empty)
    GpuStepTimes times;
    GpuStepWork work;
    double batch_h2d_bytes = 0;  ///< measured over all B sequences
    double batch_d2h_bytes = 0;
    std::vector<double> head_h2d_bytes;  ///< [H] replica 0's KV bytes over PCIe per KV head
    double index_build_ms = 0;           ///< wave: wall time of building the layer's indexes (all heads)
};

/// A batch that does not fit in GPU (or pinned host) memory; the runner skips that point.
class GpuMemoryError : public Error {
  public:
    using Error::Error;
};

class GpuBackend {
  public:
    virtual ~GpuBackend() = default;
    /// "" when the backend can run, else why not (e.g. "no CUDA device").
    virtual std::string status() const = 0;
    virtual std::string device_name() const = 0;
    /// Throws ParamError when (head_dim, group) is outside the kernels' limits.
    virtual void check_shape(int head_dim, int group) const = 0;
    /// "" when full attention's library kernel (FullKernel::library) runs this shape, else why not.
    virtual std::string library_unsupported(int head_dim, int group) const = 0;
    /// "" when full attention's cuDNN kernel (FullKernel::cudnn) runs this shape here, else why not.
    virtual std::string cudnn_unsupported(int, int) const { return "this backend has no cuDNN decode"; }
    /// The device's ceilings, measured now (about a second): "hardware": "measured" (gpu/measured.hpp).
    virtual MeasuredDevice measure() const = 0;
    /// The index of job's heads over the prompt (wave's indexes, pq's quantizers and codes), as run_layer
    /// would build it: to pass as
    /// job.built to the layer's other runs with the same parameters (the batch points, the placements).
    /// For the methods with GpuMethodInfo::shared_build (wave, pq); ParamError for another.
    virtual BuiltIndex build_index(const GpuLayerJob& job) const = 0;
    /// Runs the job, calling on_step after every selected step. Throws GpuMemoryError when the batch
    /// does not fit (before any step), ParamError on a bad job, Error on a device failure.
    virtual void run_layer(const GpuLayerJob& job, const std::function<void(const GpuStep&)>& on_step) const = 0;
};

}  // namespace retro
