// The dense layer's random weights (kernels/dense/dense_weights.hpp: every process that times DenseLayer —
// a lease's every wave run — fills one decoder layer's): Llama-3-8B's 218M fp16 entries, the counter-based
// uniform on every core (what runs) beside std::normal_distribution from one mt19937 (what ran until
// 2026-11-30), timed alike in one process. Counter: weights (entries per fill).
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/half.hpp"
#include "dense/dense_weights.hpp"

namespace {

// The earlier generator: normal entries from one mt19937, in order, on the calling thread.
std::vector<uint16_t> normal_fill(size_t rows, size_t cols, std::mt19937& rng) {
    std::normal_distribution<float> nd;
    std::vector<uint16_t> w(rows * cols);
    const float scale = 1.0f / std::sqrt((float)rows);
    for (auto& x : w) x = retro::float_to_half(nd(rng) * scale);
    return w;
}

void BM_DenseWeights(benchmark::State& state) {
    const retro::cuda::DenseShape s;  // llama3-8b
    const bool counter = state.range(0) == 1;
    size_t n = 0;
    for (auto _ : state) {
        if (counter) {
            const retro::cuda::DenseWeights w = retro::cuda::random_dense_weights(s, 1);
            n = w.wqkv.size() + w.wo.size() + w.wgu.size() + w.wdown.size();
            benchmark::DoNotOptimize(w.wgu.data());
        } else {
            std::mt19937 rng(1);
            n = 0;
            for (auto [r, c] : {std::pair<size_t, size_t>{(size_t)s.hidden, (size_t)s.qkv()},
                                {(size_t)s.attn(), (size_t)s.hidden}, {(size_t)s.hidden, 2 * (size_t)s.ffn},
                                {(size_t)s.ffn, (size_t)s.hidden}}) {
                const std::vector<uint16_t> w = normal_fill(r, c, rng);
                n += w.size();
                benchmark::DoNotOptimize(w.data());
            }
        }
    }
    state.counters["weights"] = (double)n;
    state.SetLabel(counter ? "counter-based uniform, every core" : "std::normal_distribution, one thread");
}
BENCHMARK(BM_DenseWeights)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
