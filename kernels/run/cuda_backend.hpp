#pragma once
// The CUDA backend of `retro-bench run` (docs/cuda.md): GpuBackend (lib/gpu/backend.hpp) over the
// kernel host API. Linked with kernels/ (retro_cuda) it runs on the GPU; linked with
// the family folders' CPU emulation (kernels/*/*_emulation.cpp) it runs the same orchestration on the CPU (the unit tests).
#include <memory>

#include "gpu/backend.hpp"

namespace retro::gpu_run {

std::unique_ptr<GpuBackend> make_cuda_backend();

}  // namespace retro::gpu_run
