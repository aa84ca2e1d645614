// The library full-attention baseline (cuda_api.hpp LibraryDecode): FlashInfer's batch decode kernel
// (BatchDecodeWithPagedKVCacheDispatched, the decode kernel vLLM and SGLang call) over the harness's KV
// layout, with FlashInfer's own planner (DecodePlan: how many KV chunks each request is split into so the
// grid fills the GPU) and its merge of the chunks' states. Header-only templates from the
// flashinfer-python wheel (scripts/flashinfer-headers.sh pins and unpacks them); built only when they are
// present (kernels/CMakeLists.txt), else flashinfer_decode_absent.cpp says why not.
//
// Layout: every (batch item b, KV head h) is one FlashInfer request of one KV head and g query heads.
// K, V: [B*Hkv, capacity, d] fp16 are read in place as pages of P tokens: request r's page p is page
// r*(capacity/P) + p of a pool whose page stride is P*d (HND layout with one head), so no copy is made.
// q: [B*Hkv, g, d] f32 (= [B, Hq, d]) is request r's row r*g*d; out the same; lse per query head.
// FlashInfer's LSE is base 2: run() converts it to the natural log the harness uses.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

using Variant = flashinfer::DefaultAttention</*custom_mask=*/false, /*sliding_window=*/false,
                                             /*logits_soft_cap=*/false, /*alibi=*/false>;
// fp16 output: FlashInfer's merge of the split states is built for 16-bit outputs only (its 16-byte
// vectors of float would be 512 bits); finish_kernel widens it to the harness's f32.
using Params = flashinfer::BatchDecodeParams<float, half, half, int32_t>;
constexpr auto kNoRope = flashinfer::PosEncodingMode::kNone;

void ok(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw Error(std::string("cuda: flashinfer ") + what + ": " + cudaGetErrorString(e));
}
cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }

bool group_built(int g) { return g == 1 || g == 2 || g == 3 || g == 4 || g == 6 || g == 8; }

// out[i] = o16[i] (n elements); lse[j] *= ln 2 for j < n_lse (base 2 -> natural log; -inf stays -inf).
__global__ void finish_kernel(const half* o16, float* out, int n, float* lse, int n_lse) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __half2float(o16[i]);
    if (lse && i < n_lse) lse[i] *= 0.69314718055994531f;
}

// The same widening with a second normalized state merged by LSE (row r = i / d): out = (o e^(l-m) +
// x e^(xl-m)) / (e^(l-m) + e^(xl-m)), lse = m + ln(e^(l-m) + e^(xl-m)); l = lse2[r] * ln 2 (FlashInfer's
// base-2 LSE, in its own buffer: threads of one row read it while the row's first thread writes lse).
__global__ void finish_merge_kernel(const half* o16, const float* lse2, const float* xo, const float* xl, int d,
                                    float* out, float* lse, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int r = i / d;
    const float l = lse2[r] * 0.69314718055994531f, o = __half2float(o16[i]);
    if (xl[r] == -INFINITY) {
        out[i] = o;
        if (lse && i % d == 0) lse[r] = l;
        return;
    }
    const float m = fmaxf(l, xl[r]), a = __expf(l - m), b = __expf(xl[r] - m);
    out[i] = (o * a + xo[i] * b) / (a + b);
    if (lse && i % d == 0) lse[r] = m + __logf(a + b);
}

// The page table of the unsplit path from lengths on the device (LibraryDecode::plan_device): block r
// sums the pages of the requests before it (a few hundred at most) for its indptr entry, then writes its
// own page indices (request r's pages are r * pages_per_request + p, as plan() lays them out, or the
// caller's: `given` [requests, given_stride], Quest's chosen pages) and the length of its last page.
__global__ void page_table_kernel(const int32_t* lens, int requests, int page, int pages_per_request,
                                  const int32_t* given, int given_stride, int32_t* indptr, int32_t* last,
                                  int32_t* indices) {
    __shared__ int32_t sums[128];
    const int r = blockIdx.x;
    int32_t acc = 0;
    for (int q = threadIdx.x; q < r; q += blockDim.x) acc += (lens[q] + page - 1) / page;
    sums[threadIdx.x] = acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) sums[threadIdx.x] += sums[threadIdx.x + w];
        __syncthreads();
    }
    const int32_t start = sums[0], pages = (lens[r] + page - 1) / page;
    if (threadIdx.x == 0) {
        indptr[r] = start;
        last[r] = lens[r] - (pages - 1) * page;
        if (r == requests - 1) indptr[requests] = start + pages;
    }
    for (int p = threadIdx.x; p < pages; p += blockDim.x)
        indices[start + p] = given ? given[(size_t)r * given_stride + p] : r * pages_per_request + p;
}

// The schedule of plan_device from the lengths on the device, as FlashInfer's planner chooses it on the
// host (scheduler.cuh: PartitionPagedKVCacheBinarySearchMinNumPagePerBatch) but with the lengths read
// where they are: the smallest chunk of at least min_pages pages for which the requests' tiles,
// sum_r ceil(pages_r / chunk), fit in `grid` blocks (the kernel's occupancy times the SM count, or the
// caller's B*Hkv*max_tiles); request r's tiles are blocks o_indptr[r] .. o_indptr[r+1] in order. The grid
// is launched for `grid` blocks and the ones past the last tile are masked off (block_valid_mask:
// FlashInfer's CUDA-graph padding), so the launch needs no length from the host. Splitting by the
// capacity instead (the first version) left the execution buffers, mostly shorter than their capacity, in
// too few tiles: wave's attend took 139 us at 128K batch 8 on the H200 against 37 us with the host plan.
// One block of kScheduleThreads; thread t owns requests [t*per, t*per + per) (requests <= 4 * threads).
// cub's block reductions: a version with 256 threads of 16 requests, warp reductions and one barrier per
// search step made wave's attend 5 us slower at 128K batch 1 and 13 us at batch 8 on the H200.
constexpr int kScheduleThreads = 1024, kSchedulePer = 4;
static_assert(kScheduleThreads * kSchedulePer == kLibraryDeviceRequests, "plan_device's bound, as library_api.hpp states it");
struct MaxOp {
    __device__ int operator()(int a, int b) const { return a > b ? a : b; }
};
__global__ void __launch_bounds__(kScheduleThreads)
    device_schedule_kernel(const int32_t* lens, int requests, int page, int min_pages, int grid, int32_t* request,
                           int32_t* tile, int32_t* o_indptr, bool* valid, int32_t* chunk_out) {
    using Reduce = cub::BlockReduce<int, kScheduleThreads>;
    using Scan = cub::BlockScan<int, kScheduleThreads>;
    __shared__ union {
        typename Reduce::TempStorage reduce;
        typename Scan::TempStorage scan;
    } tmp;
    __shared__ int sh;
    const int r0 = threadIdx.x * kSchedulePer;
    int pages[kSchedulePer], most = 0;
#pragma unroll
    for (int i = 0; i < kSchedulePer; ++i) {
        pages[i] = r0 + i < requests ? max(1, (lens[r0 + i] + page - 1) / page) : 0;
        most = max(most, pages[i]);
    }
    most = Reduce(tmp.reduce).Reduce(most, MaxOp{});
    if (threadIdx.x == 0) sh = most;
    __syncthreads();
    int lo = min_pages, hi = sh;  // binary search as FlashInfer's planner: lo ends as the chunk in pages
    while (lo < hi) {             // (uniform across the block: every thread sees the same sums)
        const int mid = (lo + hi) / 2;
        int n = 0;
#pragma unroll
        for (int i = 0; i < kSchedulePer; ++i) n += (pages[i] + mid - 1) / mid;
        __syncthreads();  // tmp and sh reused
        n = Reduce(tmp.reduce).Sum(n);
        if (threadIdx.x == 0) sh = n;
        __syncthreads();
        if (sh > grid) lo = mid + 1;
        else hi = mid;
    }
    const int chunk = lo;
    int tiles[kSchedulePer], mine = 0;
#pragma unroll
    for (int i = 0; i < kSchedulePer; ++i) tiles[i] = (pages[i] + chunk - 1) / chunk, mine += tiles[i];
    __syncthreads();  // the scan reuses the reductions' storage
    int first = 0, total = 0;
    Scan(tmp.scan).ExclusiveSum(mine, first, total);
#pragma unroll
    for (int i = 0; i < kSchedulePer; ++i) {
        if (r0 + i >= requests) break;
        o_indptr[r0 + i] = first;
        for (int t = 0; t < tiles[i]; ++t) request[first + t] = r0 + i, tile[first + t] = t;
        first += tiles[i];
    }
    if (threadIdx.x == 0) o_indptr[requests] = total, *chunk_out = chunk * page;
    for (int b = threadIdx.x; b < grid; b += blockDim.x) {
        valid[b] = b < total;
        if (b >= total) request[b] = 0, tile[b] = 0;
    }
}

// The largest grid FlashInfer's decode kernel runs at once for group g (its occupancy times the SM
// count), from the library's own work estimation on a one-request plan.
template <uint32_t D>
int decode_grid_for(int g, cudaStream_t s) {
    bool split = false;
    uint32_t grid = 0, pages = 0, batch = 0, gdy = 0;
    int32_t indptr[2] = {0, 1};
    cudaError_t e = cudaSuccess;
    DISPATCH_GQA_GROUP_SIZE(g, GROUP, {
        e = flashinfer::BatchDecodeWithPagedKVCacheWorkEstimationDispatched<GROUP, D, kNoRope, Variant, Params>(
            split, grid, pages, batch, gdy, 1, indptr, (uint32_t)g, 16, false, s);
    });
    if (e != cudaSuccess) throw Error(std::string("cuda: flashinfer decode occupancy: ") + cudaGetErrorString(e));
    return (int)grid;
}

template <uint32_t D>
cudaError_t plan_for(int g, void* fbuf, size_t fbytes, void* ibuf, void* hbuf, size_t ibytes,
                     flashinfer::DecodePlanInfo& info, int32_t* indptr_h, uint32_t requests, uint32_t page,
                     cudaStream_t s, size_t* f_need, size_t* i_need) {
    cudaError_t e = cudaSuccess;
    DISPATCH_GQA_GROUP_SIZE(g, GROUP, {
        auto est = flashinfer::BatchDecodeWithPagedKVCacheWorkEstimationDispatched<GROUP, D, kNoRope, Variant, Params>;
        if (f_need)
            e = flashinfer::DecodePlanWorkspaceSize<D, kNoRope, Variant, Params>(*f_need, *i_need, indptr_h, requests,
                                                                              (uint32_t)g, page, false, s, est);
        else
            e = flashinfer::DecodePlan<D, kNoRope, Variant, Params>(fbuf, fbytes, ibuf, hbuf, ibytes, info, indptr_h,
                                                                    requests, (uint32_t)g, page, false, s, est);
    });
    return e;
}

cudaError_t plan_for_dim(int d, int g, void* fbuf, size_t fbytes, void* ibuf, void* hbuf, size_t ibytes,
                         flashinfer::DecodePlanInfo& info, int32_t* indptr_h, uint32_t requests, uint32_t page,
                         cudaStream_t s, size_t* f_need, size_t* i_need) {
    return d == 64 ? plan_for<64>(g, fbuf, fbytes, ibuf, hbuf, ibytes, info, indptr_h, requests, page, s, f_need, i_need)
                   : plan_for<128>(g, fbuf, fbytes, ibuf, hbuf, ibytes, info, indptr_h, requests, page, s, f_need,
                                   i_need);
}

}  // namespace

std::string library_decode_unsupported(int d, int group) {
    if (d != 64 && d != 128)
        return "FlashInfer decode is built here for head_dim 64 and 128, not " + std::to_string(d) +
               " (use \"full_kernel\": \"own\")";
    if (!group_built(group))
        return "FlashInfer decode supports GQA group sizes 1, 2, 3, 4, 6, 8, not " + std::to_string(group) +
               " (use \"full_kernel\": \"own\")";
    return "";
}

struct LibraryDecode::Impl {
    DecodeShape s;
    int P = 16;
    int requests = 0, pages_per_request = 0;
    std::vector<int32_t> pages;                 // pages used per request at the last upload
    PinnedBuffer<int32_t> h_table;              // indptr [R+1] | last_page_len [R] | indices [...]
    DeviceBuffer<int32_t> d_table;
    DeviceBuffer<char> fbuf, ibuf;
    DeviceBuffer<uint16_t> o16;                 // [B*Hkv, g, d] fp16 output before widening
    DeviceBuffer<float> lse2;                   // [B*Hkv*g] FlashInfer's base-2 LSE when merging
    PinnedBuffer<char> hbuf;
    flashinfer::DecodePlanInfo info;
    int32_t *indptr = nullptr, *last = nullptr, *indices = nullptr;
    // plan_device: the page table (same layout as h_table) and the schedule, built on the device
    bool on_device = false;
    int grid = 0;                     // blocks launched, G (R: unsplit, one block per request)
    bool split = false;
    int max_grid = 0;                 // FlashInfer's kernel: its occupancy times the SM count (once)
    DeviceBuffer<int32_t> d_table2;
    DeviceBuffer<int32_t> schedule;   // request [G] | tile [G] | o_indptr [R+1] | chunk size [1]
    DeviceBuffer<bool> valid;         // [G] block_valid_mask
    DeviceBuffer<uint16_t> tmp_v;     // [G, g, d] fp16 partial outputs (split)
    DeviceBuffer<float> tmp_s;        // [G, g] their base-2 LSEs
};

LibraryDecode::LibraryDecode(const DecodeShape& s, int page_tokens) : impl_(nullptr) {
    const std::string why = library_decode_unsupported(s.d, s.group);
    if (!why.empty()) throw ParamError("library decode: " + why);
    if (page_tokens < 1 || s.capacity < 1 || s.capacity % page_tokens != 0 || s.batch < 1 || s.kv_heads < 1)
        throw ParamError("library decode: capacity " + std::to_string(s.capacity) +
                         " must be a positive multiple of the page size " + std::to_string(page_tokens));
    impl_ = new Impl;
    Impl& m = *impl_;
    m.s = s, m.P = page_tokens;
    m.requests = s.batch * s.kv_heads;
    m.pages_per_request = s.capacity / page_tokens;
    const size_t table = 2 * (size_t)m.requests + 1 + (size_t)m.requests * m.pages_per_request;
    m.h_table = PinnedBuffer<int32_t>(table);
    m.d_table = DeviceBuffer<int32_t>(table);
    m.o16 = DeviceBuffer<uint16_t>((size_t)m.requests * s.group * s.d);
    m.lse2 = DeviceBuffer<float>((size_t)m.requests * s.group);
}

LibraryDecode::~LibraryDecode() { delete impl_; }

void LibraryDecode::plan(const int32_t* lens, void* stream) {
    Impl& m = *impl_;
    const int R = m.requests;
    std::vector<int32_t> pages((size_t)R);
    for (int r = 0; r < R; ++r) {
        if (lens[r] < 1 || lens[r] > m.s.capacity)
            throw ParamError("library decode: request " + std::to_string(r) + " has " + std::to_string(lens[r]) +
                             " tokens; expected 1.." + std::to_string(m.s.capacity));
        pages[(size_t)r] = (lens[r] + m.P - 1) / m.P;
    }
    int32_t* indptr = m.h_table.get();
    int32_t* last = indptr + R + 1;
    int32_t* indices = last + R;
    for (int r = 0; r < R; ++r) last[r] = lens[r] - (pages[(size_t)r] - 1) * m.P;
    if (pages != m.pages) {  // the page table changes only when a request crosses a page boundary
        indptr[0] = 0;
        for (int r = 0; r < R; ++r) {
            indptr[r + 1] = indptr[r] + pages[(size_t)r];
            for (int p = 0; p < pages[(size_t)r]; ++p) indices[indptr[r] + p] = r * m.pages_per_request + p;
        }
        m.pages = pages;
        size_t f_need = 0, i_need = 0;
        ok(plan_for_dim(m.s.d, m.s.group, nullptr, 0, nullptr, nullptr, 0, m.info, indptr, R, m.P, st(stream),
                        &f_need, &i_need), "plan size");
        // twice what is asked when growing: lengths move every step (wave), and a pinned allocation
        // costs milliseconds on the step's critical path
        if (m.fbuf.size() < f_need) m.fbuf = DeviceBuffer<char>(2 * f_need);
        if (m.ibuf.size() < i_need) m.ibuf = DeviceBuffer<char>(2 * i_need), m.hbuf = PinnedBuffer<char>(2 * i_need);
        ok(plan_for_dim(m.s.d, m.s.group, m.fbuf.get(), m.fbuf.size(), m.ibuf.get(), m.hbuf.get(), m.ibuf.size(),
                        m.info, indptr, R, m.P, st(stream), nullptr, nullptr), "plan");
        copy_h2d_async(m.d_table.get(), m.h_table.get(), (size_t)(2 * R + 1 + indptr[R]) * sizeof(int32_t), stream);
    } else {
        copy_h2d_async(m.d_table.get() + R + 1, last, (size_t)R * sizeof(int32_t), stream);
    }
    m.indptr = m.d_table.get(), m.last = m.indptr + R + 1, m.indices = m.last + R;
    m.on_device = false;
}

void LibraryDecode::plan_device(const int32_t* d_lens, void* stream, int max_tiles, const int32_t* d_pages,
                                int page_stride) {
    Impl& m = *impl_;
    const int R = m.requests;
    if (d_pages && (page_stride < 1 || page_stride > m.pages_per_request))
        throw ParamError("library decode: plan_device's page table stride " + std::to_string(page_stride) +
                         " outside 1.." + std::to_string(m.pages_per_request) + " (capacity / page)");
    if (R > kScheduleThreads * kSchedulePer)
        throw ParamError("library decode: plan_device schedules at most " +
                         std::to_string(kScheduleThreads * kSchedulePer) + " (b, kv head) requests, not " +
                         std::to_string(R));
    if (m.max_grid == 0)
        m.max_grid = m.s.d == 64 ? decode_grid_for<64>(m.s.group, st(stream)) : decode_grid_for<128>(m.s.group, st(stream));
    // FlashInfer's rule: no split when the requests alone fill the kernel's grid; a caller's max_tiles
    // caps the split at that many tiles per request (1: unsplit), else the grid is the kernel's occupancy
    const bool split = max_tiles != 1 && (max_tiles > 1 || R < m.max_grid);
    const int G = !split ? R : max_tiles > 1 ? R * max_tiles : m.max_grid;
    // unsplit: a chunk of the whole capacity gives each request one tile; split: FlashInfer's lower bound
    // of 128 tokens per tile, or one page when the caller asks for a tile count
    const int min_pages = !split ? m.pages_per_request : max_tiles > 1 ? 1 : std::max(128 / m.P, 1);
    if (m.schedule.size() == 0 || G != m.grid || split != m.split) {  // sized once (in layout, not a timed step)
        m.grid = G, m.split = split;
        m.schedule = DeviceBuffer<int32_t>(2 * (size_t)G + R + 2);
        m.valid = DeviceBuffer<bool>((size_t)G);
        if (split) {
            m.tmp_v = DeviceBuffer<uint16_t>((size_t)G * m.s.group * m.s.d);
            m.tmp_s = DeviceBuffer<float>((size_t)G * m.s.group);
        }
        if (m.d_table2.size() == 0) m.d_table2 = DeviceBuffer<int32_t>(m.d_table.size());
    }
    int32_t* sc = m.schedule.get();
    device_schedule_kernel<<<1, kScheduleThreads, 0, st(stream)>>>(d_lens, R, m.P, min_pages, G, sc, sc + G,
                                                                   sc + 2 * (size_t)G, m.valid.get(),
                                                                   sc + 2 * (size_t)G + R + 1);
    ok(cudaGetLastError(), "device schedule");
    int32_t* indptr = m.d_table2.get();
    page_table_kernel<<<R, 128, 0, st(stream)>>>(d_lens, R, m.P, m.pages_per_request, d_pages, page_stride, indptr,
                                                  indptr + R + 1, indptr + 2 * R + 1);
    ok(cudaGetLastError(), "page table");
    m.on_device = true;
    m.indptr = indptr, m.last = indptr + R + 1, m.indices = indptr + 2 * R + 1;
}

void LibraryDecode::run(const float* q, const uint16_t* K, const uint16_t* V, float* out, float* lse, void* stream,
                        const float* extra_out, const float* extra_lse) {
    Impl& m = *impl_;
    if (m.pages.empty() && !m.on_device) throw Error("library decode: run() before plan()");
    const uint32_t d = (uint32_t)m.s.d, g = (uint32_t)m.s.group;
    const int64_t strides[3] = {(int64_t)m.P * d, (int64_t)m.s.capacity * d, (int64_t)d};  // page, head, token
    flashinfer::paged_kv_t<half, int32_t> kv(
        1, (uint32_t)m.P, d, (uint32_t)m.requests, flashinfer::QKVLayout::kHND,
        reinterpret_cast<half*>(const_cast<uint16_t*>(K)), reinterpret_cast<half*>(const_cast<uint16_t*>(V)), strides,
        m.indices, m.indptr, m.last);
    half* o16 = reinterpret_cast<half*>(m.o16.get());
    const bool merge = extra_out != nullptr && extra_lse != nullptr;
    Params p(const_cast<float*>(q), nullptr, kv, o16, merge ? m.lse2.get() : lse, nullptr, g, (int32_t)(g * d), (int32_t)d,
             /*window_left=*/-1, /*logits_soft_cap=*/0.0f, m.s.scale != 0 ? m.s.scale : 1.0f / std::sqrt((float)d),
             /*rope_scale=*/1.0f, /*rope_theta=*/1e4f);
    const auto& info = m.info;
    char* ib = m.ibuf.get();
    half* tmp_v = nullptr;
    float* tmp_s = nullptr;
    if (m.on_device) {  // plan_device's schedule: G blocks, the ones past the last tile masked off
        const size_t G = (size_t)m.grid;
        int32_t* sc = m.schedule.get();
        p.padded_batch_size = (uint32_t)G;
        p.request_indices = sc, p.kv_tile_indices = sc + G;
        p.o_indptr = sc + 2 * G, p.kv_chunk_size_ptr = sc + 2 * G + m.requests + 1;
        p.block_valid_mask = m.valid.get();
        if (m.split) {  // split: partial states merged by FlashInfer over o_indptr
            tmp_v = reinterpret_cast<half*>(m.tmp_v.get());
            tmp_s = m.tmp_s.get();
        }  // else tmp_v null: FlashInfer's no-partition path, block b = request b over its whole length
    } else {
        p.padded_batch_size = (uint32_t)info.padded_batch_size;
        p.request_indices = reinterpret_cast<int32_t*>(ib + info.request_indices_offset);
        p.kv_tile_indices = reinterpret_cast<int32_t*>(ib + info.kv_tile_indices_offset);
        p.o_indptr = reinterpret_cast<int32_t*>(ib + info.o_indptr_offset);
        p.kv_chunk_size_ptr = reinterpret_cast<int32_t*>(ib + info.kv_chunk_size_ptr_offset);
        if (info.split_kv) {
            p.block_valid_mask = reinterpret_cast<bool*>(ib + info.block_valid_mask_offset);
            tmp_v = reinterpret_cast<half*>(m.fbuf.get() + info.v_offset);
            tmp_s = reinterpret_cast<float*>(m.fbuf.get() + info.s_offset);
        }
    }
    cudaError_t e = cudaSuccess;
    if (d == 64)
        e = flashinfer::BatchDecodeWithPagedKVCacheDispatched<64, kNoRope, Variant, Params>(p, tmp_v, tmp_s, false,
                                                                                           st(stream));
    else
        e = flashinfer::BatchDecodeWithPagedKVCacheDispatched<128, kNoRope, Variant, Params>(p, tmp_v, tmp_s, false,
                                                                                            st(stream));
    ok(e, "batch decode");
    ok(cudaGetLastError(), "batch decode launch");
    const int n_lse = m.requests * (int)g, n = n_lse * (int)d;
    if (merge)
        finish_merge_kernel<<<(n + 255) / 256, 256, 0, st(stream)>>>(o16, m.lse2.get(), extra_out, extra_lse, (int)d,
                                                                     out, lse, n);
    else
        finish_kernel<<<(n + 255) / 256, 256, 0, st(stream)>>>(o16, out, n, lse, n_lse);
    ok(cudaGetLastError(), "output conversion");
}

}  // namespace retro::cuda
