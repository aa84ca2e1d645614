#pragma once
// Element-wise conversions on the device for the kernels that take fp16 where the harness keeps f32
// (common/convert.cu; used by library/cudnn_decode.cpp). n elements, on `stream`.
#include <cstddef>
#include <cstdint>

namespace retro::cuda {

/// dst[i] = fp16(src[i]) (round to nearest even). src: [n] f32, dst: [n] fp16 bits.
void narrow_to_half(const float* d_src, uint16_t* d_dst, size_t n, void* stream);
/// dst[i] = float(src[i]). src: [n] fp16 bits, dst: [n] f32.
void widen_from_half(const uint16_t* d_src, float* d_dst, size_t n, void* stream);
/// dst[i] = value. dst: [n] int32.
void fill_int32(int32_t* d_dst, int32_t value, size_t n, void* stream);

}  // namespace retro::cuda
