// PQCache's selection on the GPU (pq_api.hpp): lookup tables, asymmetric-distance scores, the group's
// ranking and the top-k. Written for clarity and for agreement with the CPU twin (lib/methods/pq_head.cpp)
// first: a table entry is one thread's sum over the sub-vector's dimensions in order, a score one thread's
// sum over the sub-spaces in order, each product and sum rounded on its own (__fmul_rn, __fadd_rn: no
// fused multiply-add, which the host code does not use either), the group's max written as the CPU's
// std::max; so the scores are the CPU's bit for bit and the top-k the same. The top-k is a segmented
// radix sort (CUB) of 64-bit keys (score, then the lower position) per list: every coded token sorted,
// simple rather than the fastest (a radix select of the k-th key first, as Quest's, would sort only k).
#include <cub/device/device_segmented_radix_sort.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "common/device.cuh"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

constexpr int kMaxLut = 12288;  // floats of one query head's table in shared memory (48 KiB)

// grid seqs * group, block 256: query head qh's table, entry (j, c) by one thread at a time.
__global__ void pq_lut_kernel(PqShape s, const float* q, const float* cb, float* lut) {
    const int qh = blockIdx.x, seq = qh / s.group, ksub = 1 << s.nbits, dsub = s.d / s.m;
    const float* qv = q + (size_t)qh * s.d;
    for (int idx = threadIdx.x; idx < s.m * ksub; idx += blockDim.x) {
        const int j = idx / ksub, c = idx % ksub;
        const float* qj = qv + (size_t)j * dsub;
        const float* cc = cb + (((size_t)seq * s.m + j) * ksub + c) * dsub;
        float acc = 0.0f;
        for (int e = 0; e < dsub; ++e) acc = __fadd_rn(acc, __fmul_rn(qj[e], cc[e]));
        lut[(size_t)qh * s.m * ksub + idx] = acc;
    }
}

// grid (ceil(coded / 256), seqs * group), block 256, the head's table in shared memory: thread i's score.
__global__ void pq_score_kernel(PqShape s, const float* lut, const uint16_t* codes, int coded, float* scores) {
    extern __shared__ float tab[];
    const int qh = blockIdx.y, seq = qh / s.group, ksub = 1 << s.nbits, entries = s.m * ksub;
    for (int idx = threadIdx.x; idx < entries; idx += blockDim.x) tab[idx] = lut[(size_t)qh * entries + idx];
    __syncthreads();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= coded) return;
    const uint16_t* c = codes + ((size_t)seq * s.capacity + i) * s.m;
    float v = 0.0f;
    for (int j = 0; j < s.m; ++j) v = __fadd_rn(v, tab[j * ksub + c[j]]);
    scores[(size_t)qh * s.capacity + i] = v;
}

// A float as an unsigned key that orders like the float (-0 as +0, as the CPU's comparisons see them).
__device__ inline uint32_t ordered(float f) {
    if (f == 0.0f) f = 0.0f;
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// grid (ceil(coded / 256), lists), block 256: list `list`'s key of coded token i: its ranking score
// (the query head's, or the group's max / sum in head order) in the high half, the position reversed in
// the low half (ties to the lower position). keys: [lists, coded].
__global__ void pq_key_kernel(PqShape s, const float* scores, int coded, uint64_t* keys) {
    const int list = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= coded) return;
    const bool per_head = s.rank == PqRank::per_head;
    const int per = per_head ? s.group : 1, seq = list / per;
    const int h0 = per_head ? list % per : 0, h1 = per_head ? h0 + 1 : s.group;
    const float* sc = scores + ((size_t)seq * s.group) * s.capacity + i;
    float agg = sc[(size_t)h0 * s.capacity];
    for (int h = h0 + 1; h < h1; ++h) {
        const float v = sc[(size_t)h * s.capacity];
        agg = s.rank == PqRank::max ? (agg < v ? v : agg) : __fadd_rn(agg, v);  // std::max(agg, v) / agg + v
    }
    keys[(size_t)list * coded + i] = ((uint64_t)ordered(agg) << 32) | (uint64_t)(0xffffffffu - (uint32_t)i);
}

__global__ void pq_offsets_kernel(int lists, int coded, int* offsets) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= lists) offsets[i] = i * coded;
}

// grid lists, block 256: list `list`'s attended tokens, the CPU method's order (pq_api.hpp).
__global__ void pq_lists_kernel(PqShape s, PqLists l, const uint64_t* sorted, int32_t* table, int32_t* lens) {
    const int list = blockIdx.x, seq = list / (s.rank == PqRank::per_head ? s.group : 1);  // (per(): host code)
    const int local = l.n - l.coded_end, fixed = l.sink_end + local, coded = l.coded_end - l.sink_end;
    int32_t* out = table + (size_t)list * l.width;
    const int32_t base = seq * l.kv_rows;
    for (int r = threadIdx.x; r < fixed + l.k; r += blockDim.x) {
        int tok;
        if (r < l.sink_end) tok = r;
        else if (r < fixed) tok = l.coded_end + (r - l.sink_end);
        else tok = l.sink_end + (int)(0xffffffffu - (uint32_t)(sorted[(size_t)list * coded + (r - fixed)] & 0xffffffffu));
        out[r] = base + tok;
    }
    if (threadIdx.x == 0) lens[list] = fixed + l.k;
}

void check_pq_shape(const PqShape& s) {
    if (s.seqs < 1 || s.group < 1 || s.group > kMaxGroup || !(s.d == 64 || s.d == 128 || s.d == 256) || s.m < 1 ||
        s.d % s.m != 0 || s.nbits < 1 || s.nbits > 16 || s.m * (1 << s.nbits) > kMaxLut || s.capacity < 0)
        throw ParamError("cuda pq: bad shape (group 1-8, d 64/128/256, m dividing d, m * 2^nbits <= " +
                         std::to_string(kMaxLut) + ", capacity >= 0)");
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// The scratch's parts: keys, sorted keys, offsets, the sort's temporary storage (its size for every list's
// capacity keys: the most any call sorts).
struct Scratch {
    uint64_t* keys = nullptr;
    uint64_t* sorted = nullptr;
    int* offsets = nullptr;
    void* temp = nullptr;
    size_t temp_bytes = 0, total = 0;
};

Scratch scratch_of(const PqShape& s, void* base) {
    Scratch r;
    const size_t items = (size_t)s.lists() * s.capacity;
    int* no_offsets = nullptr;
    check_cuda(cub::DeviceSegmentedRadixSort::SortKeysDescending(nullptr, r.temp_bytes, (const uint64_t*)nullptr,
                                                                 (uint64_t*)nullptr, (int)items, s.lists(),
                                                                 no_offsets, no_offsets),
               "pq_select scratch size");
    const size_t keys = align256(std::max<size_t>(1, items) * sizeof(uint64_t));
    const size_t offs = align256(((size_t)s.lists() + 1) * sizeof(int));
    r.total = 2 * keys + offs + align256(r.temp_bytes);
    if (base) {
        char* p = static_cast<char*>(base);
        r.keys = reinterpret_cast<uint64_t*>(p), r.sorted = reinterpret_cast<uint64_t*>(p + keys);
        r.offsets = reinterpret_cast<int*>(p + 2 * keys), r.temp = p + 2 * keys + offs;
    }
    return r;
}

}  // namespace

void pq_scores(const PqShape& s, const float* q, const float* codebooks, const uint16_t* codes, int coded, float* lut,
               float* scores, void* stream) {
    check_pq_shape(s);
    if (coded < 0 || coded > s.capacity)
        throw ParamError("cuda pq_scores: coded " + std::to_string(coded) + " outside 0.." + std::to_string(s.capacity));
    const int qheads = s.seqs * s.group, entries = s.m * (1 << s.nbits);
    pq_lut_kernel<<<qheads, 256, 0, st(stream)>>>(s, q, codebooks, lut);
    check_launch("pq_lut");
    if (coded == 0) return;
    pq_score_kernel<<<dim3((coded + 255) / 256, qheads), 256, (size_t)entries * sizeof(float), st(stream)>>>(
        s, lut, codes, coded, scores);
    check_launch("pq_score");
}

size_t pq_select_scratch_bytes(const PqShape& s) {
    check_pq_shape(s);
    return scratch_of(s, nullptr).total;
}

void pq_select(const PqShape& s, const float* scores, const PqLists& l, int32_t* table, int32_t* lens, void* scratch,
               void* stream) {
    check_pq_shape(s);
    const int coded = l.coded();
    if (l.sink_end < 0 || coded < 0 || coded > s.capacity || l.n < l.coded_end || l.k < 0 || l.k > coded ||
        l.width < l.sink_end + (l.n - l.coded_end) + l.k || l.kv_rows < l.n)
        throw ParamError("cuda pq_select: bad lists (0 <= sink_end <= coded_end <= n <= kv_rows, coded <= capacity, "
                         "k <= coded, width >= sink + local + k)");
    const Scratch sc = scratch_of(s, scratch);
    if (l.k > 0) {
        const int lists = s.lists();
        pq_key_kernel<<<dim3((coded + 255) / 256, lists), 256, 0, st(stream)>>>(s, scores, coded, sc.keys);
        check_launch("pq_key");
        pq_offsets_kernel<<<(lists + 256) / 256, 256, 0, st(stream)>>>(lists, coded, sc.offsets);
        check_launch("pq_offsets");
        size_t temp = 0;  // the sort's storage for these keys: within what the scratch holds (every row's keys)
        check_cuda(cub::DeviceSegmentedRadixSort::SortKeysDescending(nullptr, temp, sc.keys, sc.sorted, lists * coded,
                                                                     lists, sc.offsets, sc.offsets + 1, 0, 64),
                   "pq_select sort size");
        if (temp > sc.temp_bytes) throw Error("cuda pq_select: the sort needs more scratch than pq_select_scratch_bytes");
        temp = sc.temp_bytes;
        check_cuda(cub::DeviceSegmentedRadixSort::SortKeysDescending(sc.temp, temp, sc.keys, sc.sorted, lists * coded,
                                                                     lists, sc.offsets, sc.offsets + 1, 0, 64,
                                                                     st(stream)),
                   "pq_select sort");
    }
    pq_lists_kernel<<<s.lists(), 256, 0, st(stream)>>>(s, l, sc.sorted, table, lens);
    check_launch("pq_lists");
}

}  // namespace retro::cuda

// ---------------------------------------------------------------------------------------------------
// The chosen tokens' rows through the block cache (the KV offloaded)
// ---------------------------------------------------------------------------------------------------

namespace retro::cuda {

namespace {

constexpr int kRowThreads = 256;

// grid (blocks per list, lists), block 256: the list's rows as one flat range of 16-byte pieces (row e / vec,
// piece e % vec), each piece read from the static store, the pool or the pinned store (through UVA) and
// written to the execution buffer. Neighbouring threads read one row's pieces: a row is d*2 contiguous bytes
// wherever it lies.
__global__ void __launch_bounds__(kRowThreads)
    pq_gather_rows_kernel(PqRowSources s, const int32_t* __restrict__ table, const int32_t* __restrict__ lens,
                          int width, uint16_t* __restrict__ xk, uint16_t* __restrict__ xv) {
    const int l = blockIdx.y, seq = l / s.per, vec = s.d / 8;
    const int64_t pieces = (int64_t)min(lens[l], width) * vec, stride = (int64_t)gridDim.x * kRowThreads;
    const int32_t* tl = table + (int64_t)l * width;
    const int ub = s.unit_tokens / s.block_tokens, units = (s.kv_rows + s.unit_tokens - 1) / s.unit_tokens;
    const int32_t* bl = s.blocks ? s.blocks + (int64_t)seq * units * ub : nullptr;
    uint4* dk = reinterpret_cast<uint4*>(xk) + (int64_t)l * width * vec;
    uint4* dv = reinterpret_cast<uint4*>(xv) + (int64_t)l * width * vec;
    for (int64_t e = (int64_t)blockIdx.x * kRowThreads + threadIdx.x; e < pieces; e += stride) {
        const int i = (int)(e / vec), part = (int)(e % vec);
        const int t = tl[i] - seq * s.kv_rows;
        const uint4 *k, *v;
        if (t < s.sink_end || t >= s.coded_end) {
            const int64_t row = (int64_t)seq * s.static_rows + (t < s.sink_end ? t : s.sink_end + t - s.static_from);
            k = reinterpret_cast<const uint4*>(s.static_k) + row * vec;
            v = reinterpret_cast<const uint4*>(s.static_v) + row * vec;
        } else {
            const int u = t / s.unit_tokens, w = t % s.unit_tokens;
            const int b = bl ? bl[u * ub + w / s.block_tokens] : -1;
            if (b >= 0) {
                const int64_t row = (int64_t)seq * s.pool_rows + (int64_t)b * s.block_tokens + w % s.block_tokens;
                k = reinterpret_cast<const uint4*>(s.pool_k) + row * vec;
                v = reinterpret_cast<const uint4*>(s.pool_v) + row * vec;
            } else {
                const int64_t row = (int64_t)seq * s.kv_rows + t;
                k = reinterpret_cast<const uint4*>(s.store_k) + row * vec;
                v = reinterpret_cast<const uint4*>(s.store_v) + row * vec;
            }
        }
        dk[e] = k[part], dv[e] = v[part];
    }
}

}  // namespace

void pq_gather_rows(const PqRowSources& s, const int32_t* table, const int32_t* lens, int lists, int width,
                    uint16_t* xk, uint16_t* xv, void* stream) {
    if (const char* e = pq_row_sources_error(s, lists, width); *e)
        throw ParamError(std::string("cuda pq_gather_rows: ") + e);
    if (width == 0) return;
    // ~1024 blocks in all, 1..64 per list (a list is width * d * 4 bytes: a few MB at 128K)
    const int per_list = std::max(1, std::min(64, 1024 / lists));
    pq_gather_rows_kernel<<<dim3((unsigned)per_list, (unsigned)lists), kRowThreads, 0, st(stream)>>>(s, table, lens,
                                                                                                   width, xk, xv);
    check_launch("pq_gather_rows");
}

}  // namespace retro::cuda
