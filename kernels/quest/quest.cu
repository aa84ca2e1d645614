// Quest's selection on the GPU (quest_api.hpp): page metadata, page bounds, top pages. Written for
// clarity and for agreement with the CPU twin (lib/methods/quest_pages.cpp) first: a page's bound is one
// thread's sum over the channels in channel order, the max written as the CPU's std::max, so the scores
// are the CPU's bit for bit and the top pages the same; the top-k is a block-wide radix select over
// 64-bit keys (score, then the lower page) followed by an ordered compaction.
#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <string>

#include "common/device.cuh"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

// (QuestShape::max_pages() is host code: the kernels divide capacity by page themselves)

// grid (end - first, seqs), block d: thread e folds channel e of the page's keys.
__global__ void quest_meta_kernel(QuestShape s, const uint16_t* K, int first, uint16_t* meta) {
    const int page = first + blockIdx.x, seq = blockIdx.y, e = threadIdx.x, d = s.d, mp = (s.capacity / s.page);
    const uint16_t* k = K + ((size_t)seq * s.capacity + (size_t)page * s.page) * d + e;
    float mn = h2f(k[0]), mx = mn;
    for (int i = 1; i < s.page; ++i) {
        const float x = h2f(k[(size_t)i * d]);
        mn = fminf(mn, x), mx = fmaxf(mx, x);
    }
    // fp16 values, so the narrowing back is exact
    meta[(((size_t)seq * 2 + 0) * d + e) * mp + page] = __half_as_ushort(__float2half_rn(mn));
    meta[(((size_t)seq * 2 + 1) * d + e) * mp + page] = __half_as_ushort(__float2half_rn(mx));
}

// A float as an unsigned key that orders like the float (-0 as +0, as the CPU's comparisons see them).
__device__ inline uint32_t ordered(float f) {
    if (f == 0.0f) f = 0.0f;
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// grid (ceil(scored / 128), lists), block 128: thread j's key for page j < scored: the bound (per query
// head, or the group's max) in the high half, the page reversed in the low half (ties to the lower page).
__global__ void quest_scores_kernel(QuestShape s, const float* q, const uint16_t* meta, int scored, uint64_t* keys) {
    const int list = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= scored) return;
    const int per = s.per_head ? s.group : 1, seq = list / per, d = s.d, mp = (s.capacity / s.page);
    const int h0 = s.per_head ? list % per : 0, h1 = s.per_head ? h0 + 1 : s.group;
    const uint16_t* mn = meta + ((size_t)seq * 2 + 0) * d * mp + j;
    const uint16_t* mx = meta + ((size_t)seq * 2 + 1) * d * mp + j;
    float best = 0.0f;
    for (int h = h0; h < h1; ++h) {
        const float* qh = q + ((size_t)seq * s.group + h) * d;
        float sc = 0.0f;
        for (int e = 0; e < d; ++e) {
            // each product and sum rounded on its own (no fused multiply-add), as the CPU bound adds them
            const float a = __fmul_rn(qh[e], h2f(mx[(size_t)e * mp])), b = __fmul_rn(qh[e], h2f(mn[(size_t)e * mp]));
            sc = __fadd_rn(sc, a < b ? b : a);  // std::max(a, b)
        }
        best = h == h0 ? sc : (best < sc ? sc : best);
    }
    keys[(size_t)list * mp + j] = ((uint64_t)ordered(best) << 32) | (uint64_t)(0xffffffffu - (uint32_t)j);
}

constexpr int kSelectThreads = 512;

// grid lists, block kSelectThreads: list `list`'s page table and length (quest_select).
__global__ void quest_top_kernel(QuestShape s, const uint64_t* keys, int n, int budget, int32_t* table,
                                 int32_t* lens) {
    using Scan = cub::BlockScan<int, kSelectThreads>;
    __shared__ typename Scan::TempStorage scan;
    __shared__ int hist[256];
    __shared__ uint64_t prefix_sh;
    __shared__ int remaining_sh;
    const int list = blockIdx.x, tid = threadIdx.x, mp = (s.capacity / s.page);
    const int per = s.per_head ? s.group : 1, seq = list / per;
    const int pages = (n + s.page - 1) / s.page, last = pages - 1;
    const int32_t base = seq * mp;
    int32_t* out = table + (size_t)list * budget;
    if (pages <= budget) {  // every page (Quest: full attention while the pages fit the budget)
        for (int j = tid; j < pages; j += blockDim.x) out[j] = base + j;
        if (tid == 0) lens[list] = n;
        return;
    }
    const int r = budget - 1;  // pages chosen by their bound; the last page always
    const uint64_t* k = keys + (size_t)list * mp;
    uint64_t prefix = 0, mask = 0;
    if (r > 0) {
        // radix select of the r-th largest key (keys are distinct: exactly r keys are >= it)
        if (tid == 0) remaining_sh = r;
        for (int shift = 56; shift >= 0; shift -= 8) {
            for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0;
            __syncthreads();
            for (int j = tid; j < last; j += blockDim.x)
                if ((k[j] & mask) == prefix) atomicAdd(&hist[(k[j] >> shift) & 255], 1);
            __syncthreads();
            if (tid == 0) {
                int want = remaining_sh, bin = 255;
                for (; bin > 0 && hist[bin] < want; --bin) want -= hist[bin];
                remaining_sh = want;
                prefix_sh = prefix | ((uint64_t)bin << shift);
            }
            __syncthreads();
            prefix = prefix_sh, mask |= (uint64_t)255 << shift;
        }
        // the chosen pages in ascending order: a block-wide exclusive scan of the flags per chunk
        int written = 0;
        for (int c = 0; c < last; c += blockDim.x) {
            const int j = c + tid;
            const int flag = j < last && k[j] >= prefix ? 1 : 0;
            int pos = 0, total = 0;
            Scan(scan).ExclusiveSum(flag, pos, total);
            if (flag) out[written + pos] = base + j;
            written += total;
            __syncthreads();  // the scan's storage is reused by the next chunk
        }
    }
    if (tid == 0) {
        out[r] = base + last;
        lens[list] = r * s.page + (n - last * s.page);
    }
}

void check_quest_shape(const QuestShape& s) {
    if (s.seqs < 1 || s.group < 1 || s.group > kMaxGroup || !(s.d == 64 || s.d == 128 || s.d == 256) ||
        s.page < 1 || s.capacity < 0 || s.capacity % s.page != 0)
        throw ParamError("cuda quest: bad shape (group 1-8, d 64/128/256, page >= 1, capacity a multiple of page)");
}

}  // namespace

void quest_page_meta(const QuestShape& s, const uint16_t* K, int first, int end, uint16_t* meta, void* stream) {
    check_quest_shape(s);
    if (first < 0 || end < first || end > s.max_pages())
        throw ParamError("cuda quest_page_meta: pages [" + std::to_string(first) + ", " + std::to_string(end) +
                         ") outside [0, " + std::to_string(s.max_pages()) + ")");
    if (end == first) return;
    quest_meta_kernel<<<dim3(end - first, s.seqs), s.d, 0, st(stream)>>>(s, K, first, meta);
    check_launch("quest_page_meta");
}

size_t quest_select_scratch_bytes(const QuestShape& s) {
    check_quest_shape(s);
    return (size_t)s.lists() * std::max(1, s.max_pages()) * sizeof(uint64_t);
}

void quest_select(const QuestShape& s, const float* q, const uint16_t* meta, int n, int budget, int32_t* table,
                  int32_t* lens, void* scratch, void* stream) {
    check_quest_shape(s);
    if (n < 1 || n > s.capacity || budget < 1)
        throw ParamError("cuda quest_select: n " + std::to_string(n) + " outside 1.." + std::to_string(s.capacity) +
                         " or a budget below one page");
    const int pages = (n + s.page - 1) / s.page, scored = pages - 1;
    uint64_t* keys = static_cast<uint64_t*>(scratch);
    if (pages > budget && budget > 1 && scored > 0) {
        quest_scores_kernel<<<dim3((scored + 127) / 128, s.lists()), 128, 0, st(stream)>>>(s, q, meta, scored, keys);
        check_launch("quest_scores");
    }
    quest_top_kernel<<<s.lists(), kSelectThreads, 0, st(stream)>>>(s, keys, n, budget, table, lens);
    check_launch("quest_top");
}

}  // namespace retro::cuda
