// A CPU emulation of cuda_api.hpp, float32 like the kernels but written independently of them and of the
// lib/ references: "device" memory is host memory, launches run at once. Linked with the check bodies
// (checks.cpp) into retro_check_emulation, it tests the checks themselves (input layouts, references,
// tolerances, poisoning) on machines without a GPU. It says nothing about the CUDA kernels.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>
#include "checks.hpp"
#include "core/error.hpp"
#include "core/threads.hpp"
#include "cuda_api.hpp"
#include "core/half.hpp"
namespace retro::cuda {
std::string device_status() { return ""; }
bool device_available() { return true; }
std::string device_name() { return "CPU emulation (not a GPU)"; }
int device_cc() { return 0; }
double device_fp32_peak() { return 0; }
int device_sms() { return 0; }
void* dev_alloc(size_t b) { return std::aligned_alloc(256, (b + 255) / 256 * 256); }
void dev_free(void* p) { std::free(p); }
void* pinned_alloc(size_t b) { return dev_alloc(b); }
void pinned_free(void* p) { std::free(p); }
void copy_h2d(void* d, const void* s, size_t b) { std::memcpy(d, s, b); }
void copy_d2h(void* d, const void* s, size_t b) { std::memcpy(d, s, b); }
void copy_d2d(void* d, const void* s, size_t b) { std::memcpy(d, s, b); }
void copy_h2d_async(void* d, const void* s, size_t b, void*) { std::memcpy(d, s, b); }
void dev_memset(void* d, int x, size_t b) { std::memset(d, x, b); }
void synchronize() {}
void copy_d2h_async(void* d, const void* s, size_t b, void*) { std::memcpy(d, s, b); }
void copy_2d_async(void* d, size_t dp, const void* s, size_t sp, size_t w, size_t rows, void*) {
    for (size_t i = 0; i < rows; ++i) std::memcpy((char*)d + i * dp, (const char*)s + i * sp, w);
}
size_t device_free_bytes() { return (size_t)1 << 40; }
Stream::Stream() {}
Stream::~Stream() {}
void Stream::synchronize() {}
Event::Event() {}
Event::~Event() {}
void Event::record(void*) {  // launches ran already: the host clock is the event's time
    host_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
void Event::synchronize() {}
float Event::ms_since(const Event& start) { return (float)(host_ms_ - start.host_ms_); }
// The gate cannot hold launches that run at once: it remembers whether release() followed hold(), which
// is what a device's gate would report as its timeout.
LaunchGate::LaunchGate(double timeout_us) : timeout_us_(timeout_us) {
    if (!(timeout_us > 0)) throw ParamError("cuda LaunchGate: timeout_us must be positive");
    flag_ = static_cast<int32_t*>(pinned_alloc(2 * sizeof(int32_t)));
    flag_[0] = 1, flag_[1] = 0;
}
LaunchGate::~LaunchGate() { pinned_free(flag_); }
void LaunchGate::hold(void*) { flag_[0] = 0, flag_[1] = 1; }
void LaunchGate::release() { flag_[0] = 1, flag_[1] = 0; }
bool LaunchGate::timed_out() const { return flag_[1] != 0; }
// The emulated cluster_select and estimation have one histogram and one width: their variants
// (cuda_api.hpp's select_histograms, estimate_width) are only remembered.
EventTimer::EventTimer(void* s) : stream_(s) {}
EventTimer::~EventTimer() {}
void EventTimer::start() {}
void EventTimer::stop() {}
float EventTimer::elapsed_ms() { return 1; }
size_t cluster_rank_workspace(const ClusterScoreShape&) { return 16; }
size_t estimate_workspace_floats(const ClusterScoreShape&, int) { return 4; }
static float h(uint16_t b) { return half_to_float(b); }
void cluster_rank(const ClusterScoreShape& s, const float* q, const uint16_t* c, const uint8_t* valid, float* agg,
                  int32_t* ranked, void*, size_t, void*) {
    const float sc = s.scale ? s.scale : 1 / std::sqrt((float)s.d);
    const int M = s.clusters, g = s.group, d = s.d;
    for (int bk = 0; bk < s.batch * s.kv_heads; ++bk) {
        int b = bk / s.kv_heads, kvh = bk % s.kv_heads;
        float* a = agg + (size_t)bk * M;
        for (int j = 0; j < M; ++j) a[j] = 0;
        std::vector<float> S(M);
        for (int hh = 0; hh < g; ++hh) {
            const float* qh = q + ((size_t)b * s.kv_heads * g + kvh * g + hh) * d;
            float mx = -INFINITY;
            for (int j = 0; j < M; ++j) {
                float acc = 0;
                for (int e = 0; e < d; ++e) acc += qh[e] * h(c[((size_t)bk * M + j) * d + e]);
                S[j] = (valid && !valid[(size_t)bk * M + j]) ? -INFINITY : sc * acc;
                mx = std::max(mx, S[j]);
            }
            float sum = 0;
            for (int j = 0; j < M; ++j) sum += std::exp(S[j] - mx);
            for (int j = 0; j < M; ++j) if (S[j] != -INFINITY) a[j] += std::exp(S[j] - mx) / sum;
        }
        for (int j = 0; j < M; ++j) if (valid && !valid[(size_t)bk * M + j]) a[j] = -INFINITY;
        int32_t* r = ranked + (size_t)bk * M;
        std::iota(r, r + M, 0);
        std::stable_sort(r, r + M, [&](int x, int y) { return a[x] > a[y]; });
    }
}
// the zones' contract is met by the whole ranking (the GPU's estimation zone comes in id order instead)
void cluster_select(const ClusterScoreShape& s, int r, int e, const float* q, const uint16_t* c, const uint8_t* valid,
                    float* agg, int32_t* ranked, void* w, size_t wb, void* st) {
    if (r < 0 || e < 0 || r + e > s.clusters) throw ParamError("cuda cluster_select: zones larger than the clusters");
    cluster_rank(s, q, c, valid, agg, ranked, w, wb, st);
}
void estimate_attention(const ClusterScoreShape& s, int E, const int32_t* ids, const float* q, const uint16_t* c,
                        const uint16_t* vs, const int32_t* sizes, float* out, float* lse, float*, void*) {
    const float sc = s.scale ? s.scale : 1 / std::sqrt((float)s.d);
    const int M = s.clusters, g = s.group, d = s.d;
    for (int bk = 0; bk < s.batch * s.kv_heads; ++bk) {
        int b = bk / s.kv_heads, kvh = bk % s.kv_heads;
        for (int hh = 0; hh < g; ++hh) {
            size_t qh = (size_t)b * s.kv_heads * g + kvh * g + hh;
            float m = -INFINITY, l = 0;
            std::vector<float> acc(d, 0);
            for (int t = 0; t < E; ++t) {
                int cl = ids[(size_t)bk * E + t];
                float n = sizes[(size_t)bk * M + cl];
                if (n <= 0) continue;
                float dot = 0;
                for (int e = 0; e < d; ++e) dot += q[qh * d + e] * h(c[((size_t)bk * M + cl) * d + e]);
                float x = sc * dot, mn = std::max(m, x), corr = std::exp(m - mn), p = std::exp(x - mn);
                l = l * corr + n * p;
                for (int e = 0; e < d; ++e) acc[e] = acc[e] * corr + p * h(vs[((size_t)bk * M + cl) * d + e]);
                m = mn;
            }
            for (int e = 0; e < d; ++e) out[qh * d + e] = l > 0 ? acc[e] / l : 0;
            lse[qh] = l > 0 ? m + std::log(l) : -INFINITY;
        }
    }
}
void copy_segments(const CopySegment* segs, int n, int d, int64_t, void*) {
    for (int i = 0; i < n; ++i) {
        std::memcpy(segs[i].dst_k, segs[i].src_k, segs[i].tokens * d * 2);
        std::memcpy(segs[i].dst_v, segs[i].src_v, segs[i].tokens * d * 2);
    }
}
// Fixed stand-in numbers (not a measurement): the runner's "hardware": "measured" path runs on them in tests.
DeviceCeilings measure_ceilings(bool) {
    DeviceCeilings c;
    c.d2d_bytes_per_s = 2.0e12, c.h2d_pinned_bytes_per_s = 25e9, c.d2h_pinned_bytes_per_s = 24e9;
    c.transfer_latency_us = 7.5, c.memory_bytes = 80.0 * (1 << 30);
    return c;
}
size_t device_total_bytes() { return (size_t)80 << 30; }
std::vector<BenchRow> run_benches(const BenchOptions&, const DeviceCeilings&) {
    throw Error("CPU emulation: no benchmarks");
}
void copy_segments_memcpy(const CopySegment* segs, int n, int d, void* st) { copy_segments(segs, n, d, 0, st); }
void gather_clusters(const GatherShape& s, int steady, const int32_t* ranked, const int32_t* sizes,
                     const int32_t* offsets, const uint16_t* sk, const uint16_t* sv, uint16_t* xk, uint16_t* xv,
                     int32_t* lens, void*) {
    if (s.d % 8 || s.r < 0 || s.r > s.clusters || s.r > kMaxGatherClusters || steady < 0 || steady > s.capacity)
        throw ParamError("cuda gather_clusters: bad shape");
    for (int p = 0; p < s.bh; ++p) {
        int64_t row = steady;
        for (int i = 0; i < s.r; ++i) {
            const size_t at = (size_t)p * s.clusters;
            const int c = ranked[at + i];
            const int64_t n = std::min<int64_t>(sizes[at + c], s.capacity - row);
            if (n > 0) {
                const size_t src = ((size_t)p * s.tokens + offsets[at + c]) * s.d, dst = ((size_t)p * s.capacity + row) * s.d;
                std::memcpy(xk + dst, sk + src, n * s.d * 2);
                std::memcpy(xv + dst, sv + src, n * s.d * 2);
            }
            row += sizes[at + c];
        }
        lens[p] = (int32_t)std::min<int64_t>(row, s.capacity);
    }
}
size_t decode_workspace_floats(const DecodeShape&) { return 4; }
void decode_attention(const DecodeShape& s, const float* q, const uint16_t* K, const uint16_t* V, const int32_t* lens,
                      const float* xo, const float* xl, float* out, float* lse, float*, void*) {
    const float sc = s.scale ? s.scale : 1 / std::sqrt((float)s.d);
    const int g = s.group, d = s.d;
    for (int bk = 0; bk < s.batch * s.kv_heads; ++bk) {
        int b = bk / s.kv_heads, kvh = bk % s.kv_heads;
        int len = lens ? std::min(lens[bk], s.capacity) : s.capacity;
        for (int hh = 0; hh < g; ++hh) {
            size_t qh = (size_t)b * s.kv_heads * g + kvh * g + hh;
            float m = -INFINITY, l = 0;
            std::vector<float> acc(d, 0);
            auto add = [&](float x, float w, const float* v) {
                float mn = std::max(m, x), corr = std::exp(m - mn), p = std::exp(x - mn);
                l = l * corr + w * p;
                for (int e = 0; e < d; ++e) acc[e] = acc[e] * corr + p * v[e];
                m = mn;
            };
            std::vector<float> v(d);
            for (int t = 0; t < len; ++t) {
                float dot = 0;
                size_t row = ((size_t)bk * s.capacity + t) * d;
                for (int e = 0; e < d; ++e) dot += q[qh * d + e] * h(K[row + e]), v[e] = h(V[row + e]);
                add(sc * dot, 1, v.data());
            }
            if (xl && xl[qh] != -INFINITY) add(xl[qh], 1, xo + qh * d);
            for (int e = 0; e < d; ++e) out[qh * d + e] = l > 0 ? acc[e] / l : 0;
            if (lse) lse[qh] = l > 0 ? m + std::log(l) : -INFINITY;
        }
    }
}
// LibraryDecode: FlashInfer's shape rules, the attention by the emulated decode_attention (fp16 output
// rounding as the library's fp16 output).
std::string library_decode_unsupported(int d, int g) {
    if (d != 64 && d != 128) return "FlashInfer decode is built here for head_dim 64 and 128, not " + std::to_string(d);
    if (g != 1 && g != 2 && g != 3 && g != 4 && g != 6 && g != 8)
        return "FlashInfer decode supports GQA group sizes 1, 2, 3, 4, 6, 8, not " + std::to_string(g);
    return "";
}
struct LibraryDecode::Impl {
    DecodeShape s;
    std::vector<int32_t> lens;
};
LibraryDecode::LibraryDecode(const DecodeShape& s, int page) : impl_(nullptr) {
    const std::string why = library_decode_unsupported(s.d, s.group);
    if (!why.empty()) throw ParamError("library decode: " + why);
    if (page < 1 || s.capacity < 1 || s.capacity % page) throw ParamError("library decode: capacity not a multiple of the page");
    impl_ = new Impl{s, {}};
}
LibraryDecode::~LibraryDecode() { delete impl_; }
void LibraryDecode::plan(const int32_t* lens, void*) {
    const int n = impl_->s.batch * impl_->s.kv_heads;
    for (int i = 0; i < n; ++i)
        if (lens[i] < 1 || lens[i] > impl_->s.capacity) throw ParamError("library decode: length out of range");
    impl_->lens.assign(lens, lens + n);
}
void LibraryDecode::plan_device(const int32_t* lens, void* st, int) { plan(lens, st); }  // "device" memory is host memory
void LibraryDecode::run(const float* q, const uint16_t* K, const uint16_t* V, float* out, float* lse, void* st,
                        const float* xo, const float* xl) {
    if (impl_->lens.empty()) throw Error("library decode: run() before plan()");
    const DecodeShape& s = impl_->s;
    const size_t rows = (size_t)s.batch * s.kv_heads * s.group, d = (size_t)s.d;
    std::vector<float> l(rows);
    decode_attention(s, q, K, V, impl_->lens.data(), nullptr, nullptr, out, l.data(), nullptr, st);
    for (size_t i = 0; i < rows * d; ++i) out[i] = half_to_float(float_to_half(out[i]));  // the fp16 output
    for (size_t r = 0; r < rows; ++r) {  // the merge with a second state, in float (finish_kernel)
        if (xo && xl[r] != -INFINITY) {
            const float m = std::max(l[r], xl[r]), a = std::exp(l[r] - m), b = std::exp(xl[r] - m);
            for (size_t e = 0; e < d; ++e) out[r * d + e] = (out[r * d + e] * a + xo[r * d + e] * b) / (a + b);
            l[r] = m + std::log(a + b);
        }
        if (lse) lse[r] = l[r];
    }
}
// CudnnDecode: cuDNN's shape rules (cudnn_decode.cpp), the attention by the emulated decode_attention
// over fp16-rounded queries and with the fp16 output rounding, each item's length for all its heads.
std::string cudnn_decode_unsupported(int d, int) {
    if (d % 8 != 0 || d > 256) return "cuDNN's fused attention takes head_dim a multiple of 8 up to 256, not " + std::to_string(d);
    return "";
}
struct CudnnDecode::Impl {
    DecodeShape s;
    CudnnDecodeOptions o;
};
CudnnDecode::CudnnDecode(const DecodeShape& s, const CudnnDecodeOptions& o) : impl_(nullptr) {
    const std::string why = cudnn_decode_unsupported(s.d, s.group);
    if (!why.empty()) throw ParamError("cudnn decode: " + why);
    if (o.exact_len < 0 || o.exact_len > s.capacity)
        throw ParamError("cudnn decode: exact_len " + std::to_string(o.exact_len) + " outside 0.." +
                         std::to_string(s.capacity) + " (the capacity)");
    impl_ = new Impl{s, o};
}
CudnnDecode::~CudnnDecode() { delete impl_; }
void CudnnDecode::run(const float* q, const uint16_t* K, const uint16_t* V, const int32_t* lens, float* out, float* lse,
                      void* st) {
    const DecodeShape& s = impl_->s;
    const CudnnDecodeOptions& o = impl_->o;
    const size_t rows = (size_t)s.batch * s.kv_heads * s.group, d = (size_t)s.d;
    std::vector<int32_t> per((size_t)s.batch * s.kv_heads);
    for (size_t i = 0; i < per.size(); ++i) {
        per[i] = o.exact_len > 0 ? o.exact_len : lens[i / (size_t)s.kv_heads];
        if (per[i] < 1 || per[i] > s.capacity) throw ParamError("cudnn decode: length out of range");
    }
    std::vector<float> no_stats(o.stats ? 0 : rows);  // without stats the caller's lse is left as it was
    if (!o.stats) lse = no_stats.data();
    std::vector<float> q16(q, q + rows * d);
    for (float& x : q16) x = half_to_float(float_to_half(x));
    decode_attention(s, q16.data(), K, V, per.data(), nullptr, nullptr, out, lse, nullptr, st);
    for (size_t i = 0; i < rows * d; ++i) out[i] = half_to_float(float_to_half(out[i]));
}
void kmeans_assign(const float* x, int n, int d, const float* c, int k, const int32_t* rb, const int32_t* cb, int S,
                   int radius, int32_t* assign, void*) {
    for (int r = 0; r < n; ++r) {
        int s = 0;
        while (s + 1 < S && rb[s + 1] <= r) ++s;
        int c0 = radius < 0 ? 0 : cb[std::max(0, s - radius)], c1 = radius < 0 ? k : cb[std::min(S, s + radius + 1)];
        float best = -INFINITY;
        int arg = c0;
        for (int j = c0; j < c1; ++j) {
            float acc = 0;
            for (int e = d - 1; e >= 0; --e) acc += x[(size_t)r * d + e] * c[(size_t)j * d + e];
            if (acc > best) best = acc, arg = j;
        }
        assign[r] = arg;
    }
}
KMeansResult segmented_kmeans_gpu(const float* x, int n, int d, const KMeansParams& p) {
    KMeansResult res;
    res.plan = kmeans_plan(n, p);
    res.n = n, res.d = d, res.k = res.plan.k;
    const int K = res.k, S = res.plan.segments();
    std::vector<float> centered;
    const float* xc = kmeans_center(x, n, d, p.center, res.mean, centered);
    std::vector<float> cent((size_t)K * d);
    kmeans_initial_centroids(xc, d, res.plan, p, cent.data());
    res.assign.resize(n);
    for (int it = 0; it + 1 < p.iters; ++it) {
        kmeans_assign(xc, n, d, cent.data(), K, res.plan.row_begin.data(), res.plan.cluster_begin.data(), S, 0,
                      res.assign.data());
        std::vector<float> sum((size_t)K * d, 0);
        std::vector<int> cnt(K, 0);
        for (int r = n - 1; r >= 0; --r) {  // reverse order: a different float summation than the CPU's
            const int j = res.assign[r];
            cnt[j]++;
            for (int e = 0; e < d; ++e) sum[(size_t)j * d + e] += xc[(size_t)r * d + e];
        }
        for (int j = 0; j < K; ++j) {
            if (!cnt[j]) continue;
            float nn = 0;
            for (int e = 0; e < d; ++e) nn += sum[(size_t)j * d + e] * sum[(size_t)j * d + e];
            if (!(nn > 0)) continue;
            const float inv = 1 / std::sqrt(nn);
            for (int e = 0; e < d; ++e) cent[(size_t)j * d + e] = sum[(size_t)j * d + e] * inv;
        }
    }
    if (p.final_assign == FinalAssign::probe && S > 1) {
        // as kernels/kmeans.cu: the probed final pass (an IVF over the centroids) runs on the host
        kmeans_probe_assign(xc, d, cent.data(), res.plan, p, compute_threads(), res.assign.data());
    } else {
        kmeans_assign(xc, n, d, cent.data(), K, res.plan.row_begin.data(), res.plan.cluster_begin.data(), S,
                      kmeans_final_radius(p, S), res.assign.data());
    }
    kmeans_finish(x, cent.data(), res);
    return res;
}
}  // namespace retro::cuda
