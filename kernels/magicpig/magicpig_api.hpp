#pragma once
// Host API of MagicPIG's GPU part (kernels/cuda_api.hpp, docs/cuda.md "MagicPIG on the GPU"): magicpig/magicpig.cu;
// CPU emulation magicpig/magicpig_emulation.cpp, checks magicpig/magicpig_checks.cpp, microbenchmarks
// magicpig/magicpig_bench.cpp. MagicPIG's split (Chen et al., ICLR 2025): the GPU hashes each step's queries
// (SimHash: the signs of the query's projections onto the L*K hyperplanes), the host walks the tables, samples
// the colliding tokens and attends them; the static tokens' attention is decode_attention_pages (page = 1).
// The CPU twin is the method `magicpig` (lib/methods/magicpig.cpp, JSON-free core lib/methods/magicpig_head.hpp,
// tables lib/cluster/simhash): SimHashTables::codes sums each projection over the dimensions in order, one
// rounding per product and per sum, as the kernel does, so the GPU's codes are the CPU's bit for bit. The keys'
// codes are the CPU's own (its BLAS GEMM at build; not recomputed here).
#include <cstddef>
#include <cstdint>

namespace retro::cuda {

struct MagicpigShape {
    int seqs = 1;   ///< sequences: (replica, KV head) pairs, B * Hkv
    int heads = 1;  ///< hyperplane sets: sequence seq hashes with set seq % heads (one per KV head, replicas alike)
    int group = 1;  ///< query heads per KV head (1-8)
    int d = 128;    ///< head dim: 64, 128 or 256
    int K = 10;     ///< bits per table (0-30; 0: every code 0)
    int L = 150;    ///< tables (>= 1)
    int KL() const { return K * L; }
    int queries() const { return seqs * group; }
};

/// The SimHash codes of every query head: codes[qh][t] bit j = (sum over e < d, in order from 0, of
/// q[qh][e] * planes[set][e][t*K + j], each product and sum rounded on its own) > 0, set = (qh / group) % heads.
/// d_q: [seqs * group, d] f32 (= [B, Hkv*g, d]); d_planes: [heads, d, K*L] f32 (SimHashTables::planes() per KV
/// head); d_codes: [seqs * group, L] uint32, out.
void magicpig_hash(const MagicpigShape& s, const float* d_q, const float* d_planes, uint32_t* d_codes,
                   void* stream = nullptr);

}  // namespace retro::cuda
