// Check of the dense layer (registry.hpp): DenseLayer::forward against a double-precision reference of
// the same layer (RMSNorm, the QKV projection, the output projection and residual, RMSNorm, the gated MLP
// and residual) on small shapes, the weights and inputs fp16. The kernel stores its activations in fp16
// (as serving engines do), the reference keeps doubles, so the tolerance is fp16's. Host code.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/check_util.hpp"
#include "common/registry.hpp"
#include "cuda_api.hpp"
#include "dense/dense_weights.hpp"

namespace retro::cuda {

namespace {

using namespace check_util;

using Vec = std::vector<double>;

// y [rows, n] = x [rows, k] w [k, n] (w fp16 bits, row-major)
Vec matmul(const Vec& x, const std::vector<uint16_t>& w, int rows, int k, int n) {
    Vec y((size_t)rows * n, 0.0);
    for (int r = 0; r < rows; ++r)
        for (int i = 0; i < k; ++i) {
            const double xi = x[(size_t)r * k + i];
            for (int j = 0; j < n; ++j) y[(size_t)r * n + j] += xi * half_to_float(w[(size_t)i * n + j]);
        }
    return y;
}

Vec rmsnorm(const Vec& x, const std::vector<uint16_t>& w, int rows, int cols) {
    Vec y(x.size());
    for (int r = 0; r < rows; ++r) {
        double ss = 0;
        for (int i = 0; i < cols; ++i) ss += x[(size_t)r * cols + i] * x[(size_t)r * cols + i];
        const double inv = 1.0 / std::sqrt(ss / cols + kDenseRmsEps);
        for (int i = 0; i < cols; ++i) y[(size_t)r * cols + i] = x[(size_t)r * cols + i] * inv * half_to_float(w[(size_t)i]);
    }
    return y;
}

void check_dense(Checker& c) {
    const DenseShape shapes[] = {{"tiny", 64, 4, 2, 16, 96}, {"gqa8", 128, 8, 1, 16, 160}};
    std::mt19937 rng(3);
    for (const DenseShape& s : shapes)
        for (const int batch : {1, 3}) {
            DenseLayer layer(s, 4, 7);
            const DenseWeights w = random_dense_weights(s, 7);
            const Half x = random_half((size_t)batch * s.hidden, rng), attn = random_half((size_t)batch * s.attn(), rng);
            auto dx = upload(x.bits), da = upload(attn.bits);
            layer.forward(batch, dx.get(), da.get());
            synchronize();
            const auto got_x = download(dx);
            std::vector<uint16_t> got_qkv((size_t)batch * s.qkv());
            copy_d2h(got_qkv.data(), layer.qkv(), got_qkv.size() * sizeof(uint16_t));

            Vec rx(x.f.begin(), x.f.end()), ra(attn.f.begin(), attn.f.end());
            const Vec rqkv = matmul(rmsnorm(rx, w.norm1, batch, s.hidden), w.wqkv, batch, s.hidden, s.qkv());
            const Vec o = matmul(ra, w.wo, batch, s.attn(), s.hidden);
            for (size_t i = 0; i < rx.size(); ++i) rx[i] += o[i];
            const Vec h = matmul(rmsnorm(rx, w.norm2, batch, s.hidden), w.wgu, batch, s.hidden, 2 * s.ffn);
            Vec a((size_t)batch * s.ffn);
            for (int r = 0; r < batch; ++r)
                for (int j = 0; j < s.ffn; ++j) {
                    const double g = h[(size_t)r * 2 * s.ffn + j], u = h[(size_t)r * 2 * s.ffn + s.ffn + j];
                    a[(size_t)r * s.ffn + j] = g / (1.0 + std::exp(-g)) * u;
                }
            const Vec down = matmul(a, w.wdown, batch, s.ffn, s.hidden);
            for (size_t i = 0; i < rx.size(); ++i) rx[i] += down[i];

            const auto as_float = [](const std::vector<uint16_t>& b) {
                std::vector<float> f(b.size());
                for (size_t i = 0; i < b.size(); ++i) f[i] = half_to_float(b[i]);
                return f;
            };
            const std::vector<float> fx(rx.begin(), rx.end()), fq(rqkv.begin(), rqkv.end());
            const std::string tag = s.name + fmt(" batch=%g", batch);
            c.expect_close(tag + " qkv", as_float(got_qkv).data(), fq.data(), fq.size(), 5e-3);
            c.expect_close(tag + " x", as_float(got_x).data(), fx.data(), fx.size(), 5e-3);
        }
}

}  // namespace

RETRO_KERNEL_CHECKS(dense, 35, {{"DenseLayer", check_dense}});

}  // namespace retro::cuda
