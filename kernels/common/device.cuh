#pragma once
// Device and launch helpers shared by the kernels' .cu files (one copy here, included by each; none of
// it is public API).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace retro::cuda {

/// The largest GQA group the attention kernels take (their register arrays are sized for it).
inline constexpr int kMaxGroup = 8;

/// Throws retro::Error naming `what` when e is an error.
inline void check_cuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw Error(std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}
/// Throws retro::Error naming `what` when the last launch failed.
inline void check_launch(const char* what) { check_cuda(cudaGetLastError(), what); }
inline cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }
/// The score scale: `scale`, or 1/sqrt(d) when it is 0.
inline float default_scale(float scale, int d) { return scale != 0.0f ? scale : 1.0f / std::sqrt((float)d); }

__device__ inline float h2f(uint16_t b) { return __half2float(__ushort_as_half(b)); }

// Sum over the whole warp.
__device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

}  // namespace retro::cuda
