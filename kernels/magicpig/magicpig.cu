// MagicPIG's query hashing on the GPU (magicpig_api.hpp). Written for agreement with the CPU twin
// (lib/cluster/simhash.cpp, SimHashTables::codes) first: one thread per (query head, table) computes that
// table's K projections one after the other, each a sum over the dimensions in order with every product and
// sum rounded on its own (__fmul_rn, __fadd_rn: no fused multiply-add, which the host code does not use either,
// built without -march), and sets bit j when the projection is > 0: the CPU's codes bit for bit.
#include <cuda_runtime.h>

#include <string>

#include "common/device.cuh"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

constexpr int kHashThreads = 128;

// grid (ceil(L / 128), seqs * group), block 128, the query in shared memory: thread t's table code.
__global__ void magicpig_hash_kernel(MagicpigShape s, const float* q, const float* planes, uint32_t* codes) {
    extern __shared__ float qv[];
    const int qh = blockIdx.y, set = (qh / s.group) % s.heads, KL = s.K * s.L;
    for (int e = threadIdx.x; e < s.d; e += blockDim.x) qv[e] = q[(size_t)qh * s.d + e];
    __syncthreads();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= s.L) return;
    const float* w = planes + (size_t)set * s.d * KL + (size_t)t * s.K;
    uint32_t c = 0;
    for (int j = 0; j < s.K; ++j) {
        float acc = 0.0f;
        for (int e = 0; e < s.d; ++e) acc = __fadd_rn(acc, __fmul_rn(qv[e], w[(size_t)e * KL + j]));
        c |= (uint32_t)(acc > 0.0f) << j;
    }
    codes[(size_t)qh * s.L + t] = c;
}

}  // namespace

void magicpig_hash(const MagicpigShape& s, const float* q, const float* planes, uint32_t* codes, void* stream) {
    if (s.seqs < 1 || s.heads < 1 || s.group < 1 || s.group > kMaxGroup || !(s.d == 64 || s.d == 128 || s.d == 256) ||
        s.K < 0 || s.K > 30 || s.L < 1)
        throw ParamError("cuda magicpig_hash: bad shape (seqs, heads >= 1, group 1-8, d 64/128/256, K 0-30, L >= 1)");
    const dim3 grid((unsigned)((s.L + kHashThreads - 1) / kHashThreads), (unsigned)s.queries());
    magicpig_hash_kernel<<<grid, kHashThreads, (size_t)s.d * sizeof(float), st(stream)>>>(s, q, planes, codes);
    check_launch("magicpig_hash");
}

}  // namespace retro::cuda
