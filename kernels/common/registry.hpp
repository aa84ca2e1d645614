#pragma once
// Correctness checks and microbenchmarks of the CUDA kernels (docs/cuda.md), gathered from the kernel
// families' folders by registration (docs/adding-a-kernel.md): each family registers its checks
// (<family>_checks.cpp), its microbenchmarks (<family>_bench.cpp) and its CPU emulation
// (<family>_emulation.cpp) with the macros at the end, so the lists below hold every family whose files
// are linked, without a hand list. The check bodies are run by tests/unit/test_cuda.cpp under GTest and
// by retro_gpu_check (kernels/gpu_check_main.cpp) without it. Every check draws fresh random inputs for
// several shapes, poisons the outputs (core/check.hpp), runs the kernel and compares with the CPU
// reference in lib/.
#include <functional>
#include <string>
#include <vector>

#include "common/runtime_api.hpp"
#include "core/check.hpp"

namespace retro::cuda {

/// Every kernel check, family by family in their registered order, each family's checks in the order
/// it lists them (names are GTest-safe identifiers).
std::vector<CheckCase> gpu_checks();

// DeviceCeilings and measure_ceilings: runtime_api.hpp (the runner's "hardware": "measured" uses them too).

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

/// What a microbenchmark body is given: the options, the device's ceilings and the grids they resolve to.
struct BenchContext {
    const BenchOptions& options;
    const DeviceCeilings& ceilings;
    int reps = 0;               ///< timed repetitions: options.reps, 5 when quick
    std::vector<int> contexts;  ///< the N grid: options.contexts, else 32K and 128K (quick: 32K)
    std::vector<int> batches;   ///< the B grid, ascending: options.batches, else 1 8 16 32 64 (quick: 1 8)
    /// Whether the rows of `group` are wanted: options.only is empty or a substring of the group's name.
    bool want(const std::string& group) const;
};

/// A family's microbenchmarks: `body` returns the rows of the groups ctx.want()s, and nothing (no device
/// work either) when it wants none of them.
struct BenchCase {
    std::string name;  ///< the groups it times, e.g. "gather, wave_step"
    std::function<std::vector<BenchRow>(const BenchContext& ctx)> body;
};

/// Runs every registered microbenchmark, family by family: the wave step's pinned gather and kernels,
/// full decode (B x N grid), the library baselines, k-means. A build that has none (the CPU emulation)
/// throws Error.
std::vector<BenchRow> run_benches(const BenchOptions& o, const DeviceCeilings& c);

// ---- registration (docs/adding-a-kernel.md) ----

/// A kernel family as this binary has it: the folder's name, its place in the lists, its checks and
/// microbenchmarks, and whether the CPU emulation linked here implements its API.
struct KernelFamily {
    std::string name;
    int order = 0;  ///< the lowest order it registered with
    std::vector<CheckCase> checks;
    std::vector<BenchCase> benches;
    bool emulated = false;
};

/// Every family that registered anything, by order, then name.
std::vector<KernelFamily> kernel_families();

/// Add `family`'s checks (benchmarks) to the lists, after those of the families of lower `order`; the
/// existing families use wave 10, decode 20, library 30, kmeans 40, common 90. Called once per family
/// and kind, through the macros below (the returned 0 initializes a static). A second call for the same
/// family appends its entries after the first's.
int register_checks(const std::string& family, int order, std::vector<CheckCase> checks);
int register_benches(const std::string& family, int order, std::vector<BenchCase> benches);
/// Marks `family`'s API as implemented by the CPU emulation linked into this binary.
int register_emulation(const std::string& family);

}  // namespace retro::cuda

/// In <family>/<family>_checks.cpp, at namespace scope after the check bodies:
///   RETRO_KERNEL_CHECKS(decode, 20, {{"DecodeAttention", check_decode}});
#define RETRO_KERNEL_CHECKS(family, order, ...)                             \
    [[maybe_unused]] static const int retro_kernel_checks_##family##_ = \
        ::retro::cuda::register_checks(#family, order, __VA_ARGS__)
/// In <family>/<family>_bench.cpp:  RETRO_KERNEL_BENCHES(decode, 20, {{"full_decode", full_decode_bench}});
#define RETRO_KERNEL_BENCHES(family, order, ...)                             \
    [[maybe_unused]] static const int retro_kernel_benches_##family##_ = \
        ::retro::cuda::register_benches(#family, order, __VA_ARGS__)
/// In <family>/<family>_emulation.cpp:  RETRO_KERNEL_EMULATION(decode);
#define RETRO_KERNEL_EMULATION(family)                                         \
    [[maybe_unused]] static const int retro_kernel_emulation_##family##_ = \
        ::retro::cuda::register_emulation(#family)
