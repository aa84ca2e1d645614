// Element-wise conversions on the device (convert.hpp).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/convert.hpp"
#include "common/device.cuh"

namespace retro::cuda {

// ---------------------------------------------------------------------------------------------------
// Conversions (convert.hpp)
// ---------------------------------------------------------------------------------------------------

namespace {
__global__ void narrow_kernel(const float* src, __half* dst, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __float2half_rn(src[i]);
}
__global__ void widen_kernel(const __half* src, float* dst, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __half2float(src[i]);
}
__global__ void fill_int32_kernel(int32_t* dst, int32_t v, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = v;
}
unsigned blocks_for(size_t n) { return (unsigned)((n + 255) / 256); }
}  // namespace

void narrow_to_half(const float* src, uint16_t* dst, size_t n, void* stream) {
    if (n == 0) return;
    narrow_kernel<<<blocks_for(n), 256, 0, st(stream)>>>(src, reinterpret_cast<__half*>(dst), n);
    check_launch("narrow_to_half");
}
void widen_from_half(const uint16_t* src, float* dst, size_t n, void* stream) {
    if (n == 0) return;
    widen_kernel<<<blocks_for(n), 256, 0, st(stream)>>>(reinterpret_cast<const __half*>(src), dst, n);
    check_launch("widen_from_half");
}
void fill_int32(int32_t* dst, int32_t v, size_t n, void* stream) {
    if (n == 0) return;
    fill_int32_kernel<<<blocks_for(n), 256, 0, st(stream)>>>(dst, v, n);
    check_launch("fill_int32");
}

}  // namespace retro::cuda
