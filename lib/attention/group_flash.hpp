#pragma once
// Fused single-pass attention of a GQA group (issue 17): the g query heads that share one KV head read
// each key row and each value row exactly once, block by block (kBlock tokens: the block's rows stay in
// L1/L2 between the score and the value sweep), with an online softmax (running max and sum per head,
// flash-decoding style). Per block: scores [g, b] (one read of each key row for all g heads), the block's
// max per head (rescaling the running sums when it grows), e = exp(s - max), then acc += e V (one read of
// each value row for all g heads). Replaces two sgemm calls with a [g, n] buffer between them, which
// read K and V once too but spent most of their time packing 4-row operands and in scalar expf.
//
// Precision: scores, exp and the block's e V in float32 (exp: a polynomial with <= 2 ulp relative
// error, group_flash_kernels.hpp), the running sum and output accumulator in double (one fold per block).
// AVX2 + FMA kernels are chosen at run time where the CPU has them (else portable loops), so results may
// differ by CPU in the last bits, as OpenBLAS's already do. Same results as the per-head functions of
// attention.hpp to float tolerance (tests/unit/test_group_flash.cpp).
#include <cstdint>
#include <span>
#include <vector>

#include "attention/attention.hpp"

namespace retro {

/// Tokens per block: 128 rows of K (64 KB at d = 128) then the same 128 rows of V.
inline constexpr int kFlashBlock = 128;

/// One fused pass: what the group reads and what it writes besides its g partials.
struct GroupFlashArgs {
    const float* q = nullptr;       ///< [g, d] the group's queries
    int g = 0;                      ///< query heads in the group (>= 1)
    int d = 0;                      ///< head dimension
    float scale = 1.0f;             ///< score = scale * q . k
    const float* keys = nullptr;    ///< [>= max row + 1, d] row-major
    const float* values = nullptr;  ///< [>= max row + 1, d] row-major
    int n = 0;                      ///< tokens read
    const int32_t* ids = nullptr;   ///< [n] rows to read (unique), or nullptr: rows [0, n)
    /// Empty, or g pointers each [n]: added to member h's score of the j-th token (log weights); -inf
    /// leaves the token out of that member's attention (a union of per-member lists).
    std::span<const float* const> bias;
    float* scores = nullptr;   ///< optional out [g, n]: scale * q . k (+ bias)
    float* weights = nullptr;  ///< optional out [g, n]: each member's softmax weights over the n tokens
    bool portable = false;     ///< force the portable kernels even where AVX2 + FMA is available (tests)
};

/// Block buffers reused across calls.
struct GroupFlashScratch {
    std::vector<float> q;                       ///< [gp, d] queries padded to a multiple of 4 heads
    std::vector<float> s;                       ///< [gp, kFlashBlock] block scores, then weights
    std::vector<float> acc;                     ///< [gp, d] the block's e V
    std::vector<const float*> krow, vrow;       ///< [kFlashBlock] row pointers of the block
    std::vector<float> block_max;               ///< [g, blocks] running max per block (weights out)
};

/// Writes partials[h] (m = max score, l = sum exp(s - m), acc = sum exp(s - m) v, all over the member's
/// tokens; empty where every score is -inf or n = 0) for h in [0, g), and scores/weights if asked for.
void group_flash_attention(const GroupFlashArgs& a, std::span<PartialAttention> partials, GroupFlashScratch& x);

/// Which kernels group_flash_attention uses for head dimension d on this CPU: "avx2" or "portable".
const char* group_flash_kernel_name(int d);

}  // namespace retro
