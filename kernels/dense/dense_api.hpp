#pragma once
// Host API of a decoder layer's work outside attention (issue 40 #5: whole-model throughput; kernels/
// cuda_api.hpp, docs/cuda.md "The layer outside attention"): dense/dense.cu (cuBLAS's GEMMs, loaded at
// run time, and two small kernels); CPU emulation dense/dense_emulation.cpp, check dense/dense_checks.cpp,
// microbenchmark dense/dense_bench.cpp (group dense_layer).
#include <cstdint>
#include <string>
#include <vector>

namespace retro::cuda {

/// A Llama-style decoder layer's shapes (config.json: hidden_size, num_attention_heads,
/// num_key_value_heads, head_dim, intermediate_size).
struct DenseShape {
    std::string name = "llama3-8b";
    int hidden = 4096;
    int q_heads = 32;
    int kv_heads = 8;
    int head_dim = 128;
    int ffn = 14336;
    int qkv() const { return (q_heads + 2 * kv_heads) * head_dim; }  ///< the QKV projection's outputs
    int attn() const { return q_heads * head_dim; }                  ///< the output projection's inputs
    /// fp16 weights of one layer: Wqkv [hidden, qkv], Wo [attn, hidden], Wgate_up [hidden, 2 ffn],
    /// Wdown [ffn, hidden], two RMSNorm weights [hidden]
    double weight_bytes() const {
        return 2.0 * ((double)hidden * qkv() + (double)attn() * hidden + 3.0 * hidden * ffn + 2.0 * hidden);
    }
};

/// Llama-3-8B's and Qwen2.5-7B's layers (their config.json); Qwen2.5's QKV biases are left out (3 x
/// (28 + 8) x 128 additions, nothing beside the GEMMs).
inline DenseShape llama3_8b_dense() { return {"llama3-8b", 4096, 32, 8, 128, 14336}; }
inline DenseShape qwen25_7b_dense() { return {"qwen2.5-7b", 3584, 28, 4, 128, 18944}; }

/// RMSNorm's epsilon in the dense layer (Llama-3's 1e-5; Qwen2.5's 1e-6 changes no time).
inline constexpr float kDenseRmsEps = 1e-5f;

/// The layer's random weights as set at construction (seeded; fp16 bits, layouts as set_weights'), so the
/// check and the emulation build the same ones.
struct DenseWeights {
    std::vector<uint16_t> wqkv, wo, wgu, wdown, norm1, norm2;
};
// random_dense_weights(shape, seed): dense/dense_weights.hpp

/// "" when this build and machine run the dense layer (cuBLAS's libcublas.so.13 loads: RETRO_CUBLAS_LIB
/// names one, else the library path; scripts/gpu/cudnn-env.sh puts PyTorch's wheel's folder there), else why not.
std::string dense_unsupported();

/// One decoder layer outside attention for `batch` tokens (a decode step of B sequences), fp16 weights and
/// activations, float32 accumulation (cuBLAS GemmEx with CUBLAS_COMPUTE_32F: what serving engines run):
///   qkv = RMSNorm(x; w1) Wqkv                         (the attention's input, written to qkv())
///   x  += attn Wo                                     (attn: the attention's output, [batch, attn()])
///   h   = RMSNorm(x; w2) Wgate_up;  x += (SiLU(h[:, :ffn]) * h[:, ffn:]) Wdown
/// The weights are random (seeded), as only their shapes matter for the time; set_weights replaces them
/// (the check). Throws Error naming dense_unsupported() when cuBLAS does not load.
class DenseLayer {
  public:
    /// Weights from random_dense_weights(s, seed).
    DenseLayer(const DenseShape& s, int max_batch, unsigned seed = 1);
    ~DenseLayer();
    DenseLayer(const DenseLayer&) = delete;
    DenseLayer& operator=(const DenseLayer&) = delete;
    /// Host fp16 weights: wqkv [hidden, qkv], wo [attn, hidden], wgu [hidden, 2 ffn], wdown [ffn, hidden],
    /// norm1, norm2 [hidden] (row-major, the input dimension first).
    void set_weights(const DenseWeights& w);
    /// The layer for `batch` <= max_batch tokens on `stream`: d_x [batch, hidden] fp16, read and updated
    /// (the residual stream); d_attn [batch, attn()] fp16 (the attention's output).
    void forward(int batch, uint16_t* d_x, const uint16_t* d_attn, void* stream = nullptr);
    const uint16_t* qkv() const;  ///< [max_batch, qkv()] fp16: the last forward's QKV projection
    const DenseShape& shape() const;

  private:
    struct Impl;
    Impl* impl_;
};

}  // namespace retro::cuda
