// cuDNN's fused attention as a full-attention baseline (cuda_api.hpp CudnnDecode): the SDPA graph of the
// cuDNN frontend (header-only, from the nvidia-cudnn-frontend wheel: scripts/cudnn-frontend-headers.sh)
// over cuDNN 9's engines — what PyTorch's SDPA runs when it picks its cuDNN backend, the fastest decode
// kernel the H200 runs measured (4.4-4.5 TB/s from batch 8, where FlashInfer's decode reached 3.7-3.8).
//
// The library is loaded at run time (the frontend's NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING): a binary built
// here runs on a machine without cuDNN, and finds it on one with it — the GPU machines have cuDNN only
// inside PyTorch's wheel (nvidia/cudnn/lib), named by RETRO_CUDNN_LIB or LD_LIBRARY_PATH. The frontend
// then reaches the CUDA runtime through libcudart.so.13 (its own dlopen); both runtimes share the device's
// primary context, so the buffers and the stream this process made are the ones cuDNN uses.
//
// Layout: Q [B, Hq, 1, d], K/V [B, Hkv, capacity, d] (the harness's [B*Hkv, capacity, d] read in place),
// O [B, Hq, 1, d], stats [B, Hq, 1, 1]; each batch item's KV length is the padding mask's seq_len_kv, or,
// with CudnnDecodeOptions::exact_len, the graph's own sequence length (K/V [B, Hkv, exact_len, d] with the
// capacity's strides, no mask: the graph PyTorch builds for a dense call, rebuilt per length).
#include <dlfcn.h>

#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <cudnn_frontend.h>

#include "common/convert.hpp"
#include "core/error.hpp"
#include "cuda_api.hpp"

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // the frontend's dynamic loading looks every cuDNN symbol up here
}  // namespace cudnn_frontend

namespace retro::cuda {

namespace fe = cudnn_frontend;

namespace {

// cuDNN 9 and the CUDA 13 runtime the frontend calls, loaded once; "" or why not.
const std::string& load_cudnn() {
    static std::once_flag once;
    static std::string why;
    std::call_once(once, [] {
        const char* env = std::getenv("RETRO_CUDNN_LIB");
        const std::string name = env && *env ? env : "libcudnn.so.9";
        void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
        if (!h) {
            const char* e = dlerror();
            why = "cannot load " + name + " (" + (e ? e : "?") +
                  "): set RETRO_CUDNN_LIB to cuDNN 9's libcudnn.so.9 or put its folder on LD_LIBRARY_PATH (on a "
                  "machine with PyTorch: python3 -c 'import nvidia.cudnn as m; print(m.__path__[0])'/lib)";
            return;
        }
        if (!dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL)) {
            const char* e = dlerror();
            why = std::string("cannot load libcudart.so.13, which the cuDNN frontend calls (") + (e ? e : "?") +
                  "): put the CUDA 13 runtime's folder on LD_LIBRARY_PATH";
            return;
        }
        fe::cudnn_dlhandle = h;
        size_t version = 0;
        try {
            version = fe::detail::get_backend_version();
        } catch (const std::exception& e) {
            why = name + ": " + e.what();
            return;
        }
        if (version < 90000) why = name + " is cuDNN " + std::to_string(version) + "; cuDNN 9 is needed";
    });
    return why;
}

std::string shape_unsupported(int d) {
    if (d % 8 != 0 || d > 256)
        return "cuDNN's fused attention takes head_dim a multiple of 8 up to 256, not " + std::to_string(d);
    return "";
}

void ok(fe::error_t e, const char* what) {
    if (e.is_bad()) throw ParamError(std::string("cudnn decode: ") + what + ": " + e.get_message());
}

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kSeqQ, kSeqKv };

}  // namespace

std::string cudnn_decode_unsupported(int d, int) {
    const std::string shape = shape_unsupported(d);
    if (!shape.empty()) return shape;
    return load_cudnn();
}

struct CudnnDecode::Impl {
    DecodeShape s;
    CudnnDecodeOptions o;
    cudnnHandle_t handle = nullptr;
    fe::graph::Graph graph;
    DeviceBuffer<char> workspace;
    DeviceBuffer<uint16_t> q16, o16;  // [B, Hq, d] fp16 query and output
    DeviceBuffer<int32_t> ones;       // [B] seq_len_q = 1
    DeviceBuffer<float> stats;        // [B, Hq] cuDNN's stats when the caller wants no lse
    ~Impl() {
        if (handle) fe::detail::destroy_handle(handle);
    }
};

CudnnDecode::CudnnDecode(const DecodeShape& s, const CudnnDecodeOptions& o) : impl_(nullptr) {
    const std::string why = cudnn_decode_unsupported(s.d, s.group);
    if (!why.empty()) throw ParamError("cudnn decode: " + why);
    if (s.batch < 1 || s.kv_heads < 1 || s.group < 1 || s.capacity < 1)
        throw ParamError("cudnn decode: batch, kv heads, group and capacity must be positive");
    if (o.exact_len < 0 || o.exact_len > s.capacity)
        throw ParamError("cudnn decode: exact_len " + std::to_string(o.exact_len) + " outside 0.." +
                         std::to_string(s.capacity) + " (the capacity)");
    auto m = std::make_unique<Impl>();
    m->s = s, m->o = o;
    if (fe::detail::create_handle(&m->handle) != CUDNN_STATUS_SUCCESS)
        throw Error("cudnn decode: cudnnCreate failed (no device, or a cuDNN built for another CUDA)");
    const int64_t B = s.batch, Hkv = s.kv_heads, Hq = (int64_t)s.kv_heads * s.group, S = s.capacity, d = s.d;
    const int64_t L = o.exact_len > 0 ? o.exact_len : S;  // the rows the graph reads of each capacity
    auto& g = m->graph;
    g.set_io_data_type(fe::DataType_t::HALF)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const auto tensor = [&](const char* name, int64_t uid, std::vector<int64_t> dim, std::vector<int64_t> stride) {
        return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dim).set_stride(stride));
    };
    auto Q = tensor("Q", kQ, {B, Hq, 1, d}, {Hq * d, d, d, 1});
    auto K = tensor("K", kK, {B, Hkv, L, d}, {Hkv * S * d, S * d, d, 1});
    auto V = tensor("V", kV, {B, Hkv, L, d}, {Hkv * S * d, S * d, d, 1});
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("decode")
                    .set_generate_stats(o.stats)
                    .set_attn_scale(s.scale != 0 ? s.scale : 1.0f / std::sqrt((float)s.d));
    if (o.exact_len == 0) {
        auto seq_q = tensor("seq_q", kSeqQ, {B, 1, 1, 1}, {1, 1, 1, 1});
        auto seq_kv = tensor("seq_kv", kSeqKv, {B, 1, 1, 1}, {1, 1, 1, 1});
        seq_q->set_data_type(fe::DataType_t::INT32);
        seq_kv->set_data_type(fe::DataType_t::INT32);
        opts.set_padding_mask(true).set_seq_len_q(seq_q).set_seq_len_kv(seq_kv);
    }
    auto [O, stats] = g.sdpa(Q, K, V, opts);
    O->set_output(true).set_uid(kO).set_dim({B, Hq, 1, d}).set_stride({Hq * d, d, d, 1});
    if (o.stats) stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT);
    ok(g.build(m->handle, {fe::HeurMode_t::A}), "no cuDNN engine builds this attention");
    int64_t ws = 0;
    ok(g.get_workspace_size(ws), "workspace size");
    m->workspace = DeviceBuffer<char>((size_t)std::max<int64_t>(ws, 1));
    m->q16 = DeviceBuffer<uint16_t>((size_t)(B * Hq * d));
    m->o16 = DeviceBuffer<uint16_t>((size_t)(B * Hq * d));
    m->ones = DeviceBuffer<int32_t>((size_t)B);
    m->stats = DeviceBuffer<float>((size_t)(B * Hq));
    fill_int32(m->ones.get(), 1, (size_t)B, nullptr);
    synchronize();
    impl_ = m.release();
}

CudnnDecode::~CudnnDecode() { delete impl_; }

void CudnnDecode::run(const float* q, const uint16_t* K, const uint16_t* V, const int32_t* lens, float* out,
                      float* lse, void* stream) {
    Impl& m = *impl_;
    const size_t n = (size_t)m.s.batch * m.s.kv_heads * m.s.group * m.s.d;
    if (fe::detail::set_stream(m.handle, static_cast<cudaStream_t>(stream)) != CUDNN_STATUS_SUCCESS)
        throw Error("cudnn decode: cudnnSetStream failed");
    narrow_to_half(q, m.q16.get(), n, stream);
    std::unordered_map<int64_t, void*> ptrs = {{kQ, m.q16.get()},
                                               {kK, const_cast<uint16_t*>(K)},
                                               {kV, const_cast<uint16_t*>(V)},
                                               {kO, m.o16.get()}};
    if (m.o.stats) ptrs[kStats] = lse ? lse : m.stats.get();  // stats [B, Hq, 1, 1] f32 = the lse layout [B, Hq]
    if (m.o.exact_len == 0) ptrs[kSeqQ] = m.ones.get(), ptrs[kSeqKv] = const_cast<int32_t*>(lens);
    fe::error_t e = m.graph.execute(m.handle, ptrs, m.workspace.get());
    if (e.is_bad()) throw Error("cudnn decode: execute: " + e.get_message());
    widen_from_half(m.o16.get(), out, n, stream);
}

}  // namespace retro::cuda
