#pragma once
// Correctness checks and microbenchmarks of the CUDA kernels (docs/cuda.md). The check bodies are run by
// tests/unit/test_cuda.cpp under GTest and by retro_gpu_check (kernels/gpu_check_main.cpp) without it.
// Every check draws fresh random inputs for several shapes, poisons the outputs (core/check.hpp), runs
// the kernel and compares with the CPU reference in lib/.
#include <string>
#include <vector>

#include "core/check.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

/// Every kernel check, in a fixed order (names are GTest-safe identifiers).
std::vector<CheckCase> gpu_checks();

// DeviceCeilings and measure_ceilings: cuda_api.hpp (the runner's "hardware": "measured" uses them too).

struct BenchRow {
    std::string name;      ///< kernel or phase
    std::string params;    ///< shape, e.g. "B=8 N=32768 Hq=32 Hkv=8 d=128"
    double time_us = 0;    ///< median over the timed repetitions (CUDA events)
    double bytes = 0;      ///< bytes the kernel must move (0 = not a bandwidth kernel)
    double flops = 0;      ///< floating-point operations (0 = not a compute kernel)
    double rate = 0;       ///< bytes/s or FLOP/s achieved
    std::string unit;      ///< "B/s" or "FLOP/s"
    double ceiling = 0;    ///< the ceiling it is compared with, same unit
    std::string ceiling_name;
    double fraction = 0;   ///< rate / ceiling
    std::string extra;     ///< phase breakdown etc. as a JSON object body ("\"k\": v, ...") or ""
};

struct BenchOptions {
    bool quick = false;  ///< fewer shapes and repetitions (a smoke run)
    int reps = 20;       ///< timed repetitions (median reported)
    std::string only;    ///< "" every group; else the groups whose name contains it: gather, full_decode
                         ///< (own, FlashInfer, cuDNN's variants), wave_step, kmeans
    std::vector<int> contexts, batches;  ///< the N and B grid of full_decode and wave_step; empty: defaults
};

/// Runs every microbenchmark: full decode (B x N grid), wave decode step per layer vs full, pinned
/// gather (zero-copy and cudaMemcpyAsync), cluster ranking, estimation, k-means.
std::vector<BenchRow> run_benches(const BenchOptions& o, const DeviceCeilings& c);

}  // namespace retro::cuda
