// A decoder layer outside attention on the GPU (dense_api.hpp): cuBLAS's GemmEx for the four projections
// (fp16 in and out, float32 accumulation), one RMSNorm kernel and one SiLU-and-multiply kernel; the
// residual adds ride on the GEMMs (beta = 1). cuBLAS is loaded at run time (dlopen), as cuDNN is, so the
// program starts where it is absent and only the dense layer is refused there.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "common/device.cuh"
#include "cuda_api.hpp"
#include "dense/dense_weights.hpp"

namespace retro::cuda {

namespace {

// The four cuBLAS entry points the layer calls, from libcublas.so.13 (RETRO_CUBLAS_LIB, else the path).
struct Cublas {
    cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
    cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                              const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                              cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
    std::string error;  ///< why it did not load ("" = loaded)
};

const Cublas& cublas() {
    static Cublas c;
    static std::once_flag once;
    std::call_once(once, [] {
        const char* env = std::getenv("RETRO_CUBLAS_LIB");
        const std::string name = env && *env ? env : "libcublas.so.13";
        void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
        if (!h) {
            c.error = "cannot load " + name + " (" + dlerror() + "): set RETRO_CUBLAS_LIB to cuBLAS's libcublas.so.13 or " +
                      "put its folder on LD_LIBRARY_PATH (scripts/gpu/cudnn-env.sh finds PyTorch's)";
            return;
        }
        const auto sym = [&](const char* n) {
            void* p = dlsym(h, n);
            if (!p && c.error.empty()) c.error = name + " has no " + n;
            return p;
        };
        c.create = reinterpret_cast<decltype(c.create)>(sym("cublasCreate_v2"));
        c.destroy = reinterpret_cast<decltype(c.destroy)>(sym("cublasDestroy_v2"));
        c.set_stream = reinterpret_cast<decltype(c.set_stream)>(sym("cublasSetStream_v2"));
        c.gemm_ex = reinterpret_cast<decltype(c.gemm_ex)>(sym("cublasGemmEx"));
    });
    return c;
}

void check_cublas(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS) throw Error(std::string("cublas: ") + what + " failed (status " + std::to_string((int)s) + ")");
}

// grid rows, block 256: y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, fp16 in and out, float inside.
__global__ void rmsnorm_kernel(const uint16_t* x, const uint16_t* w, uint16_t* y, int cols, float eps) {
    __shared__ float part[32];
    const uint16_t* xr = x + (size_t)blockIdx.x * cols;
    float ss = 0;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        const float v = h2f(xr[i]);
        ss += v * v;
    }
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float t = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0f;
        t = warp_sum(t);
        if (threadIdx.x == 0) part[0] = t;
    }
    __syncthreads();
    const float inv = rsqrtf(part[0] / cols + eps);
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
        y[(size_t)blockIdx.x * cols + i] = __half_as_ushort(__float2half_rn(h2f(xr[i]) * inv * h2f(w[i])));
}

// h: [rows, 2 ffn] (gate, then up) -> a: [rows, ffn] = SiLU(gate) * up.
__global__ void silu_mul_kernel(const uint16_t* h, uint16_t* a, int rows, int ffn) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)rows * ffn) return;
    const size_t r = i / ffn, c = i % ffn;
    const float g = h2f(h[r * 2 * ffn + c]), u = h2f(h[r * 2 * ffn + ffn + c]);
    a[i] = __half_as_ushort(__float2half_rn(g / (1.0f + __expf(-g)) * u));
}

}  // namespace

std::string dense_unsupported() { return cublas().error; }

struct DenseLayer::Impl {
    DenseShape s;
    int max_batch = 0;
    cublasHandle_t handle = nullptr;
    DeviceBuffer<uint16_t> wqkv, wo, wgu, wdown, norm1, norm2;
    DeviceBuffer<uint16_t> xn, qkv, h, a;  // activations: [max_batch, hidden | qkv | 2 ffn | ffn]
    // y[rows, n] (+)= x[rows, k] w[k, n], row-major: cuBLAS's column-major y^T = w^T x^T
    void gemm(int rows, int n, int k, const uint16_t* x, const uint16_t* w, uint16_t* y, bool accumulate) {
        const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
        check_cublas(cublas().gemm_ex(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, rows, k, &one, w, CUDA_R_16F, n, x,
                                      CUDA_R_16F, k, &beta, y, CUDA_R_16F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "GemmEx");
    }
};

DenseLayer::DenseLayer(const DenseShape& s, int max_batch, unsigned seed) : impl_(new Impl) {
    const std::string why = dense_unsupported();
    if (!why.empty()) {
        delete impl_;
        throw Error("dense layer: " + why);
    }
    Impl& m = *impl_;
    m.s = s, m.max_batch = max_batch;
    const size_t B = (size_t)max_batch;
    m.wqkv = DeviceBuffer<uint16_t>((size_t)s.hidden * s.qkv());
    m.wo = DeviceBuffer<uint16_t>((size_t)s.attn() * s.hidden);
    m.wgu = DeviceBuffer<uint16_t>((size_t)s.hidden * 2 * s.ffn);
    m.wdown = DeviceBuffer<uint16_t>((size_t)s.ffn * s.hidden);
    m.norm1 = DeviceBuffer<uint16_t>((size_t)s.hidden);
    m.norm2 = DeviceBuffer<uint16_t>((size_t)s.hidden);
    m.xn = DeviceBuffer<uint16_t>(B * s.hidden);
    m.qkv = DeviceBuffer<uint16_t>(B * s.qkv());
    m.h = DeviceBuffer<uint16_t>(B * 2 * s.ffn);
    m.a = DeviceBuffer<uint16_t>(B * s.ffn);
    check_cublas(cublas().create(&m.handle), "cublasCreate");
    set_weights(random_dense_weights(s, seed));
}

DenseLayer::~DenseLayer() {
    if (impl_->handle) cublas().destroy(impl_->handle);
    delete impl_;
}

void DenseLayer::set_weights(const DenseWeights& w) {
    Impl& m = *impl_;
    const auto put = [](DeviceBuffer<uint16_t>& d, const std::vector<uint16_t>& h) {
        if (h.size() != d.size()) throw ParamError("dense layer: a weight of the wrong size");
        copy_h2d(d.get(), h.data(), d.bytes());
    };
    put(m.wqkv, w.wqkv), put(m.wo, w.wo), put(m.wgu, w.wgu), put(m.wdown, w.wdown), put(m.norm1, w.norm1),
        put(m.norm2, w.norm2);
}

void DenseLayer::forward(int batch, uint16_t* x, const uint16_t* attn, void* stream) {
    Impl& m = *impl_;
    const DenseShape& s = m.s;
    if (batch < 1 || batch > m.max_batch) throw ParamError("dense layer: batch outside 1..max_batch");
    check_cublas(cublas().set_stream(m.handle, st(stream)), "cublasSetStream");
    rmsnorm_kernel<<<batch, 256, 0, st(stream)>>>(x, m.norm1.get(), m.xn.get(), s.hidden, kDenseRmsEps);
    check_launch("rmsnorm");
    m.gemm(batch, s.qkv(), s.hidden, m.xn.get(), m.wqkv.get(), m.qkv.get(), false);
    m.gemm(batch, s.hidden, s.attn(), attn, m.wo.get(), x, true);
    rmsnorm_kernel<<<batch, 256, 0, st(stream)>>>(x, m.norm2.get(), m.xn.get(), s.hidden, kDenseRmsEps);
    check_launch("rmsnorm");
    m.gemm(batch, 2 * s.ffn, s.hidden, m.xn.get(), m.wgu.get(), m.h.get(), false);
    const size_t n = (size_t)batch * s.ffn;
    silu_mul_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st(stream)>>>(m.h.get(), m.a.get(), batch, s.ffn);
    check_launch("silu_mul");
    m.gemm(batch, s.hidden, s.ffn, m.a.get(), m.wdown.get(), x, true);
}

const uint16_t* DenseLayer::qkv() const { return impl_->qkv.get(); }
const DenseShape& DenseLayer::shape() const { return impl_->s; }

}  // namespace retro::cuda
