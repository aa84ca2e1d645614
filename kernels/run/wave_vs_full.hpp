#pragma once
// The wave decode step vs full attention per layer on the GPU (Llama-3-8B shape, 32K/128K
// context, batch 1-64) for the RETRO_GPU_ONLY driver retro_gpu_check, which cannot build retro-bench
// (no HDF5 or JSON library on the GPU machines): the same layer runs as `retro-bench run` with "backend":
// "cuda" (kernels/run, GpuBackend), on an in-memory synthetic layer (synthetic_layer.hpp), with the same
// cost-model prediction (lib/gpu/prediction) and, at batch 1, the harness's evaluator for accuracy.
#include <functional>
#include <string>
#include <vector>

#include "cuda_api.hpp"
#include "gpu/backend.hpp"
#include "run/synthetic_layer.hpp"
#include "system/hardware_spec.hpp"

namespace retro::gpu_run {

struct WaveRunOptions {
    std::vector<int> contexts = {32768, 131072};  ///< prompt tokens
    std::vector<int> batches = {1, 2, 4, 8, 16, 32, 64};
    SyntheticLayerParams layer;  ///< shape, steps and seed (prompt: each context)
    WaveParams wave;             ///< wave defaults (RetroInfer §5)
    bool kmeans_on_gpu = true;   ///< segmented_kmeans_gpu (the CPU k-means of this build has no BLAS)
    // The system model's defaults (lib/system/system_params.hpp): a 5% LRU cache of 2 KB blocks, 50 ns
    // per mapping-table lookup.
    double cache = 0.05;
    int block_bytes = 2048;
    int token_block = 128;  ///< pq offloaded: tokens per block-cache unit (PQCache's 128-token blocks)
    /// batches of this many distinct sequences (issue 40 #1): replica b runs the synthetic layer of seed
    /// layer.seed + 1000 * (b % sequences); the rows of a method whose GPU run takes none (magicpig) stay copies
    int sequences = 1;
    double lookup_ns = 50;
    int warmup = 1;
    /// Decode steps run in full (selection, gather, attention, cache admission) but left out of the
    /// means: they fill the block cache before the timed steps (the one timing rule, issue 40 #1; the
    /// layer's `steps` count them). 0: every step is timed, from a cold cache.
    int warm_steps = 0;
    const HardwareSpec* hw = nullptr;  ///< the profile the prediction is for; none = no prediction
    /// Full attention's kernels, each a row: FlashInfer ("full") when this build has it for the shape,
    /// cuDNN's fused attention ("full-cudnn") when this build has the frontend and the machine loads
    /// libcudnn.so.9, the own kernel ("full-own") when full_own. Every row's speedup is over the fastest
    /// full row at its context and batch (the baseline, named in WaveRunRow::baseline).
    bool full_library = true, full_cudnn = true, full_own = true;
    /// wave rows: "wave" with the clustered KV in pinned host memory (misses over PCIe: the paper's
    /// setting) through the host's lookups and copy lists (the paper's path), "wave-dev" the same with the
    /// cache's table on the GPU (the execution buffers assembled on the device, the cache's update after the
    /// step: issue 40 #2), "wave-hbm" with the KV in device memory (the within-GPU-memory setting; its
    /// execution buffers assembled on the device: GpuLayerJob::wave_device_gather) and "wave-hbm-host", the
    /// same through the host's lookups and FlashInfer's planner (the comparison)
    bool wave_host = true, wave_dev = true, wave_hbm = true, wave_hbm_host = false;
    /// RetroInfer's Figure 15 ablation beside "wave-dev" (the cache, its update after the step): rows
    /// "wave-dev-nocache" (no GPU block cache: every retrieval cluster read over PCIe) and "wave-dev-async"
    /// (the cache's update applied at the next step while the GPU ranks and estimates)
    bool wave_ablation = true;
    /// a "quest" row: Quest on the GPU (the KV in device memory, its batch capped like full's) at `quest`'s
    /// parameters: Quest's headline budget of 2048 tokens in 16-token pages, a page list per query head
    bool quest = true;
    QuestGpuParams quest_params;
    /// a "pq" row: PQCache on the GPU (KV in device memory) attending 2,048 tokens like Quest's row: 4
    /// initial + 64 local + k = 1,980 retrieved; m = 2, nbits = 6, gqa max (PQCache's defaults)
    bool pq = true;
    PqGpuParams pq_params = [] {
        PqGpuParams p;
        p.head.k = 1980;
        return p;
    }();
    /// a "magicpig" row: MagicPIG's split (docs/methods/magicpig.md "On the GPU"): the queries' SimHash and the
    /// static tokens' attention (4 initial + 64 local + decode) on the GPU, the sampling and the sampled
    /// attention on the host's cores (host_threads; 0: all but one) over host-memory KV; K = 10, L = 150
    bool magicpig = true;
    MagicPigGpuParams magicpig_params;
    int host_threads = 0;  ///< wave's host lookup workers, magicpig's sampling workers (GpuLayerJob::host_threads)
    /// Whole-model throughput (issue 40 #5): the layer's work outside attention (cuda::DenseLayer: RMSNorm,
    /// the projections, the gated MLP; cuBLAS) timed in the same run at each row's batch for `dense`'s
    /// shape, the same layer as the synthetic one's attention (Llama-3-8B by default), and every row's
    /// tokens/s per GPU = batch / (layers x (its step with admission + the dense time)). false, or no cuBLAS
    /// here: no dense time, no tokens/s.
    bool dense_layer = true;
    cuda::DenseShape dense = cuda::llama3_8b_dense();
    int layers = 32;  ///< the model's decoder layers (Llama-3-8B: 32)
    int dense_reps = 10;  ///< timed forwards per batch (median)
    bool launch_gate = true;  ///< every row's steps timed behind a launch gate (GpuLayerJob::launch_gate)
    /// each row's step as one CUDA graph where its method takes it (GpuLayerJob::step_graph: full, wave on the
    /// device path without the asynchronous update); the other rows as without
    bool step_graph = false;
    double hbm_bytes_per_s = 0;  ///< the measured device-memory ceiling (D2D read+write); 0 = no fractions
    /// Asked before each row starts: true = start no further row (a time budget, a stop signal). The rows
    /// measured so far are returned with their speed-ups, dense time, tokens/s and calibration, so a run cut
    /// short by a lease's limit still writes its report. Empty = run every row.
    std::function<bool()> stop;
};

/// One (method, context, batch): means over the decode steps.
struct WaveRunRow {
    std::string method;  ///< "full" (FlashInfer) | "full-cudnn" | "full-own" (the own kernel) | "wave" | "wave-dev" | "wave-dev-nocache" | "wave-dev-async" | "wave-hbm" | "wave-hbm-host" | "quest" | "pq" | "magicpig"
    int context = 0, batch = 0, steps = 0;
    std::string status = "ok";  ///< or "does not fit: ..." (larger batches of the method are skipped)
    GpuStepTimes measured;
    double h2d_bytes = 0;  ///< KV bytes over PCIe per layer step, whole batch
    bool modeled = false;
    double model_select_us = 0, model_h2d_us = 0, model_attend_us = 0, model_step_us = 0;
    double out_err = -1, recall = -1;  ///< batch 1 only: vs exact attention, means over query heads and steps
    double replica_diff = 0;           ///< largest relative L2 distance of a replica's outputs from replica 0's
    double speedup = 0;   ///< the baseline's step_us / this row's at the same context and batch (0: it is the baseline)
    std::string baseline; ///< the fastest full row's method at this context and batch
    double kv_bytes = 0;  ///< K+V bytes the attention read per step, whole batch (device or pinned memory)
    double hbm_frac = 0;  ///< kv_bytes / step_us over the measured device-memory ceiling (0 = unknown)
    double index_bytes = 0;   ///< index bytes (centroids, value sums) read per step, whole batch
    /// The calibrated phase model (gpu/prediction.hpp PhaseFit, fitted per method to its rows at the
    /// smallest context's smallest and largest batch): the select phase (rank + estimation) and the
    /// attend phase (gather + attention) predicted from this row's bytes; 0 = not modeled (a row with a
    /// host phase or PCIe traffic, or a method with fewer than two calibration points)
    double cal_select_us = 0, cal_attend_us = 0, cal_step_us = 0;
    bool calibration_point = false;  ///< one of the rows the method's model was fitted to
    bool launch_gate = true;  ///< the steps timed behind a launch gate (WaveRunOptions::launch_gate)
    int gate_timeouts = 0;    ///< steps whose gate ended by its timeout (their times include launch calls)
    bool step_graph = false;  ///< its steps ran as one CUDA graph each (phases untimed: attend_us = step_us)
    double dense_us = 0;      ///< one layer's work outside attention at this batch (0: not measured)
    /// batch / (layers x (total_us + dense_us)): the whole model's decode tokens/s per GPU (0: not measured)
    double tokens_per_s = 0;
};

/// The run on a tiny layer at the CPU emulation's speed (retro_gpu_check --tiny, the tests): context 2048,
/// batches 1 and 2, 3 steps, 2 KV heads of d 64, a tiny dense layer of 2 layers.
void make_tiny(WaveRunOptions& o);

std::vector<WaveRunRow> run_wave_vs_full(const GpuBackend& gpu, const WaveRunOptions& o,
                                         const std::function<void(const std::string&)>& progress);

std::string wave_run_json(const std::vector<WaveRunRow>& rows);  ///< a JSON array, one object per row
std::string wave_run_text(const std::vector<WaveRunRow>& rows);  ///< a table, one line per row

/// A profile's numbers from "key value" lines (hardware_fields() names; "name NAME"; # comments), as
/// scripts/gpu-check.sh writes them from configs/hardware/<name>.json. Throws Error naming the line.
HardwareSpec read_hardware_values(const std::string& path);

}  // namespace retro::gpu_run
