// The wave step's execution buffers (wave_api.hpp): segment copies (copy_segments, its cudaMemcpyAsync
// variant, the cache admission scatter) and the device-only assembly from the ranked clusters
// (gather_clusters).
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <string>

#include "common/device.cuh"
#include "core/error.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

// ---------------------------------------------------------------------------------------------------
// Segment copies (execution buffer, admission scatter)
// ---------------------------------------------------------------------------------------------------

namespace {

constexpr int kCopyTokensPerBlock = 64;

// grid (n segments, ceil(max tokens / 64)): block (x, y) copies tokens [y*64, y*64+64) of segment x, keys and
// values, 16 bytes per thread per step. Reading src through UVA makes pinned host sources zero-copy.
__global__ void copy_segments_kernel(const CopySegment* segs, int d) {
    const CopySegment sg = segs[blockIdx.x];
    const int64_t t0 = (int64_t)blockIdx.y * kCopyTokensPerBlock;
    if (t0 >= sg.tokens) return;
    const int64_t t1 = min(sg.tokens, t0 + kCopyTokensPerBlock);
    const int vec_per_token = d / 8;  // uint4 = 8 halves
    const int64_t n = (t1 - t0) * vec_per_token;
    const uint4* sk = reinterpret_cast<const uint4*>(sg.src_k) + t0 * vec_per_token;
    const uint4* sv = reinterpret_cast<const uint4*>(sg.src_v) + t0 * vec_per_token;
    uint4* dk = reinterpret_cast<uint4*>(sg.dst_k) + t0 * vec_per_token;
    uint4* dv = reinterpret_cast<uint4*>(sg.dst_v) + t0 * vec_per_token;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        dk[i] = sk[i];
        dv[i] = sv[i];
    }
}

}  // namespace

void copy_segments(const CopySegment* segs, int n, int d, int64_t max_tokens, void* stream) {
    if (d % 8 != 0) throw ParamError("cuda copy_segments: d must be a multiple of 8");
    if (n == 0 || max_tokens <= 0) return;
    const int64_t chunks = (max_tokens + kCopyTokensPerBlock - 1) / kCopyTokensPerBlock;
    if (chunks > 65535) throw ParamError("cuda copy_segments: a segment over 4M tokens");
    copy_segments_kernel<<<dim3((unsigned)n, (unsigned)chunks), 256, 0, st(stream)>>>(segs, d);
    check_launch("copy_segments");
}

void copy_segments_memcpy(const CopySegment* segs, int n, int d, void* stream) {
    for (int i = 0; i < n; ++i) {
        const size_t b = (size_t)segs[i].tokens * d * 2;
        check_cuda(cudaMemcpyAsync(segs[i].dst_k, segs[i].src_k, b, cudaMemcpyDefault, st(stream)), "segment k");
        check_cuda(cudaMemcpyAsync(segs[i].dst_v, segs[i].src_v, b, cudaMemcpyDefault, st(stream)), "segment v");
    }
}

// ---------------------------------------------------------------------------------------------------
// Execution buffers from the ranked clusters on the device (wave with its KV in device memory)
// ---------------------------------------------------------------------------------------------------

namespace {

constexpr int kGatherThreads = 256, kGatherUnroll = 4;
// blocks per pair: enough for ~1024 blocks in all (8 per SM on a 132-SM part), 2..64 per pair; the first
// version's fixed 16 gave a batch-1 step (8 pairs) 128 blocks each walking its ~10 clusters one
// dependent load-store round trip at a time: 31 us for ~10 MB at 128K (H200)
int gather_blocks_per_pair(int bh) { return std::max(2, std::min(64, 1024 / std::max(bh, 1))); }

// grid (gather_blocks_per_pair(bh), bh), block 256, dynamic shared memory 2r ints (3r with the cache). Every
// block of a pair scans the sizes of the pair's r ranked clusters (their first destination rows, a block
// scan; a few hundred loads, cheaper to redo per block than a second launch) and their source rows, then
// copies the pair's destination rows as one flat range of 16-byte pieces over all its blocks: piece e is row
// e / vec of the execution buffer, whose cluster is the last one starting at or before it (a binary search
// over the rows in shared memory; empty clusters share their start with the next and lose to it),
// kGatherUnroll pieces' loads in flight per thread before their stores. Block 0 writes the pair's length
// (and with the cache the misses' rows). kCached: a resident cluster's rows come from its pool blocks (the
// block of row w of the cluster is blocks[first + w / bt]), the others' from the store.
template <bool kCached>
__global__ void __launch_bounds__(kGatherThreads)
    gather_clusters_kernel(GatherShape s, int steady_arg, const int32_t* __restrict__ ranked,
                           const int32_t* __restrict__ sizes, const int32_t* __restrict__ offsets,
                           const uint16_t* __restrict__ store_k, const uint16_t* __restrict__ store_v,
                           uint16_t* __restrict__ xk, uint16_t* __restrict__ xv, int32_t* __restrict__ lens,
                           GatherCache cache) {
    using Scan = cub::BlockScan<int, kGatherThreads>;
    __shared__ typename Scan::TempStorage scan;
    extern __shared__ int gather_smem[];
    int* row = gather_smem;          // [r] first row after the steady zone, rank order
    int* src = gather_smem + s.r;    // [r] first row in the pair's store
    int* blk = gather_smem + 2 * s.r;  // [r] kCached: the cluster's first entry in blocks, -1 = not resident
    const int p = blockIdx.y, tid = threadIdx.x;
    const int steady = s.steady_at ? min(max(*s.steady_at, 0), s.capacity) : steady_arg;
    const int32_t* rk = ranked + (size_t)p * s.clusters;
    const int32_t* sz = sizes + (size_t)p * s.clusters;
    const int32_t* of = offsets + (size_t)p * s.clusters;
    const int per = (s.r + kGatherThreads - 1) / kGatherThreads, i0 = tid * per, i1 = min(s.r, i0 + per);
    int sum = 0;
    for (int i = i0; i < i1; ++i) sum += sz[rk[i]];
    int first = 0, total = 0;
    Scan(scan).ExclusiveSum(sum, first, total);
    if (blockIdx.x == 0 && tid == 0) lens[p] = min(s.capacity, steady + total);
    const int32_t* bl = kCached ? cache.blocks + (int64_t)p * cache.nb : nullptr;
    for (int i = i0; i < i1; ++i) {
        const int c = rk[i];
        row[i] = first, src[i] = of[c];
        if constexpr (kCached) {
            const int f = cache.first[(size_t)p * s.clusters + c];
            const bool hit = sz[c] > 0 && bl[f] >= 0;
            blk[i] = hit ? f : -1;
            if (blockIdx.x == 0)
                cache.miss_rows[(size_t)p * s.r + i] = !hit && sz[c] > 0 && steady + first < s.capacity ? steady + first : -1;
        }
        first += sz[c];
    }
    __syncthreads();
    const int vec = s.d / 8;  // uint4 = 8 halves
    const int64_t rows = min(total, s.capacity - steady), pieces = rows * vec;
    const int64_t stride = (int64_t)gridDim.x * kGatherThreads;
    const uint4* sk = reinterpret_cast<const uint4*>(store_k) + (int64_t)p * s.tokens * vec;
    const uint4* sv = reinterpret_cast<const uint4*>(store_v) + (int64_t)p * s.tokens * vec;
    const uint4* pk = kCached ? reinterpret_cast<const uint4*>(cache.pool_k) + (int64_t)p * cache.pool_rows * vec : nullptr;
    const uint4* pv = kCached ? reinterpret_cast<const uint4*>(cache.pool_v) + (int64_t)p * cache.pool_rows * vec : nullptr;
    uint4* dk = reinterpret_cast<uint4*>(xk) + ((int64_t)p * s.capacity + steady) * vec;
    uint4* dv = reinterpret_cast<uint4*>(xv) + ((int64_t)p * s.capacity + steady) * vec;
    for (int64_t e0 = (int64_t)blockIdx.x * kGatherThreads + tid; e0 < pieces; e0 += kGatherUnroll * stride) {
        uint4 k[kGatherUnroll], v[kGatherUnroll];
#pragma unroll
        for (int u = 0; u < kGatherUnroll; ++u) {
            const int64_t e = e0 + u * stride;
            if (e >= pieces) break;
            const int r = (int)(e / vec);
            int lo = 0, hi = s.r - 1;  // the last cluster starting at or before row r (row[0] = 0)
            while (lo < hi) {
                const int mid = (lo + hi + 1) >> 1;
                if (row[mid] <= r) lo = mid;
                else hi = mid - 1;
            }
            const int w = r - row[lo];  // the row within its cluster
            if (kCached && blk[lo] >= 0) {
                const int64_t at = ((int64_t)bl[blk[lo] + w / cache.block_tokens] * cache.block_tokens +
                                    w % cache.block_tokens) * vec + e % vec;
                k[u] = pk[at], v[u] = pv[at];
            } else {
                const int64_t at = (int64_t)(src[lo] + w) * vec + e % vec;
                k[u] = sk[at], v[u] = sv[at];
            }
        }
#pragma unroll
        for (int u = 0; u < kGatherUnroll; ++u) {
            const int64_t e = e0 + u * stride;
            if (e >= pieces) break;
            dk[e] = k[u], dv[e] = v[u];
        }
    }
}

}  // namespace

void gather_clusters(const GatherShape& s, int steady, const int32_t* ranked, const int32_t* sizes,
                     const int32_t* offsets, const uint16_t* store_k, const uint16_t* store_v, uint16_t* xk,
                     uint16_t* xv, int32_t* lens, void* stream, const GatherCache* cache) {
    if (s.d % 8 != 0 || s.bh < 1 || s.bh > 65535 || s.r < 0 || s.r > s.clusters || s.r > kMaxGatherClusters ||
        steady < 0 || steady > s.capacity)
        throw ParamError("cuda gather_clusters: bad shape (d a multiple of 8, 1..65535 pairs, r <= clusters and <= " +
                         std::to_string(kMaxGatherClusters) + ", steady <= capacity)");
    if (cache && (!cache->first || !cache->blocks || !cache->miss_rows || cache->block_tokens < 1 ||
                  (cache->pool_rows > 0 && (!cache->pool_k || !cache->pool_v))))
        throw ParamError("cuda gather_clusters: a cache view without its tables, pool or miss rows");
    const int blocks = gather_blocks_per_pair(s.bh);
    const size_t smem = (cache ? 3 : 2) * (size_t)s.r * sizeof(int);
    const auto kernel = cache ? gather_clusters_kernel<true> : gather_clusters_kernel<false>;
    // the most dynamic shared memory any r needs, allowed once per process and variant whatever this r: the
    // 48 KB default bounds static + dynamic, so a test on the dynamic part alone fails the launch for the r
    // whose dynamic part is just under 48 KB (the kernel's own static arrays on top)
    static const cudaError_t raised[2] = {
        cudaFuncSetAttribute(gather_clusters_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)(2 * kMaxGatherClusters * sizeof(int))),
        cudaFuncSetAttribute(gather_clusters_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)(3 * kMaxGatherClusters * sizeof(int)))};
    if (raised[cache ? 1 : 0] != cudaSuccess)
        throw Error(std::string("cuda: gather_clusters smem: ") + cudaGetErrorString(raised[cache ? 1 : 0]));
    kernel<<<dim3((unsigned)blocks, (unsigned)s.bh), kGatherThreads, smem, st(stream)>>>(
        s, steady, ranked, sizes, offsets, store_k, store_v, xk, xv, lens, cache ? *cache : GatherCache{});
    check_launch("gather_clusters");
}

namespace {

__global__ void set_entries_kernel(const int64_t* __restrict__ at, const int32_t* __restrict__ value, int n,
                                   int32_t* __restrict__ table) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) table[at[i]] = value[i];
}

}  // namespace

void set_entries(const int64_t* at, const int32_t* value, int n, int32_t* table, void* stream) {
    if (n < 0) throw ParamError("cuda set_entries: n < 0");
    if (n == 0) return;
    set_entries_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st(stream)>>>(at, value, n, table);
    check_launch("set_entries");
}

}  // namespace retro::cuda
