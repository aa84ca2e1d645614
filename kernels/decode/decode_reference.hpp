#pragma once
// The reference and the random inputs of the full-attention checks (decode/decode_checks.cpp), shared
// by decode_attention's check and the library baselines' (library/library_checks.cpp).
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/check_util.hpp"
#include "decode/decode_api.hpp"

namespace retro::cuda::check_util {

// The reference of decode_attention and LibraryDecode: per (b, kv head) and query head, attention over the
// first lens[bk] tokens of K, V: [B*Hkv, cap, d] (partial_attention_ids), merged with the extra (out, lse)
// partial when xo/xl are given (as m = lse, l = 1, acc = out). rout: [B, Hkv*g, d], rlse: [B, Hkv*g].
void reference_decode(const std::vector<float>& q, const Half& K, const Half& V, const std::vector<int32_t>& lens,
                      int B, int Hkv, int g, int cap, int d, const std::vector<float>* xo,
                      const std::vector<float>* xl, std::vector<float>& rout, std::vector<float>& rlse);

// One decode check case's shape and random inputs, drawn in this order from rng: q [B, Hkv*g, d] f32
// (normal, sigma qsigma), then K and V [B*Hkv, cap, d] fp16; the tag names the shape in the reports.
// Shared by the checks of decode_attention, LibraryDecode and CudnnDecode.
struct DecodeInputs {
    DecodeShape s;
    int nbk = 0, Hq = 0;  // B*Hkv requests, Hkv*g query heads
    std::vector<float> q;
    Half K, V;
    std::string tag;
};
DecodeInputs decode_inputs(int B, int Hkv, int g, int cap, int d, float qsigma, std::mt19937& rng);

}  // namespace retro::cuda::check_util
