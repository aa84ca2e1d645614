// Part of the CPU emulation of cuda_api.hpp (docs/cuda.md, "CPU emulation"): "device" memory is host memory,
// launches queued on their streams (common/emulation_streams.hpp); written independently of the kernels and
// of lib/cluster/simhash.
// This file: MagicPIG's query hashing (magicpig_api.hpp).
#include <cstdint>

#include "common/emulation_streams.hpp"
#include "common/emulation_trace.hpp"
#include "common/registry.hpp"
#include "core/error.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

void magicpig_hash(const MagicpigShape& s, const float* q, const float* planes, uint32_t* codes, void* st) {
    if (s.seqs < 1 || s.heads < 1 || s.group < 1 || s.group > 8 || !(s.d == 64 || s.d == 128 || s.d == 256) ||
        s.K < 0 || s.K > 30 || s.L < 1)
        throw ParamError("cuda magicpig_hash: bad shape (seqs, heads >= 1, group 1-8, d 64/128/256, K 0-30, L >= 1)");
    emu::kernel("magicpig_hash", q, planes, codes);
    emu::enqueue(st, [=] {
        const int KL = s.KL();
        for (int qh = 0; qh < s.queries(); ++qh) {
            const float* x = q + (size_t)qh * s.d;
            const float* w = planes + (size_t)((qh / s.group) % s.heads) * s.d * KL;
            for (int t = 0; t < s.L; ++t) {
                uint32_t c = 0;
                for (int j = 0; j < s.K; ++j) {
                    float acc = 0;
                    for (int e = 0; e < s.d; ++e) acc += x[e] * w[(size_t)e * KL + t * s.K + j];
                    if (acc > 0) c |= 1u << j;
                }
                codes[(size_t)qh * s.L + t] = c;
            }
        }
    });
}

RETRO_KERNEL_EMULATION(magicpig);

}  // namespace retro::cuda
