// Part of the CPU emulation of cuda_api.hpp (docs/cuda.md, "CPU emulation"): "device" memory is host memory,
// launches queued on their streams (common/emulation_streams.hpp); written independently of the kernels.
// This file: the dense layer (dense_api.hpp), float32 sums with every stored activation rounded to fp16 as the
// kernels store it.
#include <cmath>
#include <vector>

#include "common/emulation_streams.hpp"
#include "common/emulation_trace.hpp"
#include "common/registry.hpp"
#include "core/half.hpp"
#include "cuda_api.hpp"
#include "dense/dense_weights.hpp"

namespace retro::cuda {

std::string dense_unsupported() { return ""; }

struct DenseLayer::Impl {
    DenseShape s;
    int max_batch = 0;
    DenseWeights w;
    DeviceBuffer<uint16_t> qkv;  ///< device memory, as the kernel's (uninitialized: the poison)
};

DenseLayer::DenseLayer(const DenseShape& s, int max_batch, unsigned seed) : impl_(new Impl) {
    impl_->s = s, impl_->max_batch = max_batch;
    impl_->w = random_dense_weights(s, seed);
    impl_->qkv = DeviceBuffer<uint16_t>((size_t)max_batch * s.qkv());
}
DenseLayer::~DenseLayer() {
    emu::run_all();  // a queued forward may still read the weights
    delete impl_;
}
void DenseLayer::set_weights(const DenseWeights& w) { impl_->w = w; }
const uint16_t* DenseLayer::qkv() const { return impl_->qkv.get(); }
const DenseShape& DenseLayer::shape() const { return impl_->s; }

namespace {

float hf(uint16_t b) { return half_to_float(b); }

// y[r, :] (+)= x[r, :] w, all fp16, float sums; rows x k times k x n
void matmul(const uint16_t* x, const std::vector<uint16_t>& w, uint16_t* y, int rows, int k, int n, bool add) {
    for (int r = 0; r < rows; ++r)
        for (int j = 0; j < n; ++j) {
            float acc = add ? hf(y[(size_t)r * n + j]) : 0.0f;
            for (int i = 0; i < k; ++i) acc += hf(x[(size_t)r * k + i]) * hf(w[(size_t)i * n + j]);
            y[(size_t)r * n + j] = float_to_half(acc);
        }
}

std::vector<uint16_t> rmsnorm(const uint16_t* x, const std::vector<uint16_t>& w, int rows, int cols) {
    std::vector<uint16_t> y((size_t)rows * cols);
    for (int r = 0; r < rows; ++r) {
        float ss = 0;
        for (int i = 0; i < cols; ++i) ss += hf(x[(size_t)r * cols + i]) * hf(x[(size_t)r * cols + i]);
        const float inv = 1.0f / std::sqrt(ss / cols + kDenseRmsEps);
        for (int i = 0; i < cols; ++i) y[(size_t)r * cols + i] = float_to_half(hf(x[(size_t)r * cols + i]) * inv * hf(w[(size_t)i]));
    }
    return y;
}

}  // namespace

void DenseLayer::forward(int batch, uint16_t* x, const uint16_t* attn, void* st) {
    if (batch < 1 || batch > impl_->max_batch) throw ParamError("dense layer: batch outside 1..max_batch");
    emu::kernel("dense_forward", batch, x, attn);
    Impl* impl = impl_;
    emu::enqueue(st, [=] {
        const DenseShape& s = impl->s;
        const DenseWeights& w = impl->w;
        std::vector<uint16_t> xn = rmsnorm(x, w.norm1, batch, s.hidden);
        matmul(xn.data(), w.wqkv, impl->qkv.get(), batch, s.hidden, s.qkv(), false);
        matmul(attn, w.wo, x, batch, s.attn(), s.hidden, true);
        xn = rmsnorm(x, w.norm2, batch, s.hidden);
        std::vector<uint16_t> h((size_t)batch * 2 * s.ffn), a((size_t)batch * s.ffn);
        matmul(xn.data(), w.wgu, h.data(), batch, s.hidden, 2 * s.ffn, false);
        for (int r = 0; r < batch; ++r)
            for (int c = 0; c < s.ffn; ++c) {
                const float g = hf(h[(size_t)r * 2 * s.ffn + c]), u = hf(h[(size_t)r * 2 * s.ffn + s.ffn + c]);
                a[(size_t)r * s.ffn + c] = float_to_half(g / (1.0f + std::exp(-g)) * u);
            }
        matmul(a.data(), w.wdown, x, batch, s.ffn, s.hidden, true);
    });
}

RETRO_KERNEL_EMULATION(dense);

}  // namespace retro::cuda
