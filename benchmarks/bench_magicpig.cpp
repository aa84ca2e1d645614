// MagicPIG's host part (its GPU twin's split, kernels/run/magicpig_layer.cpp; docs/methods/magicpig.md "On the
// GPU"): for one KV head and one decode step, each of the group's 4 query heads' collision test against the
// L tables, its sampling and weights (MagicPigHead::sample: the method's own code) and the importance-weighted
// attention over the sampled tokens (partial_attention_ids with the log weights), float32 KV in host memory,
// one thread — what each worker of the layer run's host pool does per (replica, KV head). The query codes are
// computed before the timed loop (the GPU hashes them in the split). K = 10, L = 150 (MagicPIG's defaults),
// 4 initial + 64 local tokens static, prompts of 32K and 128K tokens, d = 128.
// Keys: the method tests' blob heads (tests/unit/method_harness.hpp), 24 clusters with wide noise around them
// (the GPU twin's backend test's setting): a synthetic stand-in, the sampled fraction is this data's.
// Counters (per query head): sampled (tokens sampled), visited (bucket entries walked), frac (sampled / prompt).
#include <benchmark/benchmark.h>

#include <cmath>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "attention/attention.hpp"
#include "method_harness.hpp"  // tests/unit: blob_head
#include "methods/magicpig_head.hpp"

namespace {

constexpr int kD = 128, kG = 4, kSteps = 4;

struct Setup {
    retro::HeadSlice head;
    std::unique_ptr<retro::MagicPigHead> mp;
    std::vector<uint32_t> codes;  // [kG * kSteps, L]: the query heads' codes of each step
};

const Setup& setup(int n) {
    static std::map<int, std::unique_ptr<Setup>> cache;
    auto& s = cache[n];
    if (s) return *s;
    s = std::make_unique<Setup>();
    s->head = retro::method_test::blob_head({.prompt_len = n, .steps = kSteps, .d = kD, .group = kG, .seed = 31, .centers = 24,
                         .center_scale = 1.0f, .offset_scale = 1.0f, .key_noise = 1.5f, .query_scale = 1.5f,
                         .query_noise = 1.5f});
    retro::MethodContext ctx;
    ctx.head_dim = kD, ctx.group = kG, ctx.prompt_len = n, ctx.scale = 1.0f / std::sqrt((float)kD);
    s->mp = std::make_unique<retro::MagicPigHead>(retro::MagicPigHeadParams{});
    s->mp->build(ctx, retro::KVView{s->head.keys.data(), s->head.values.data(), n, kD});
    const int L = s->mp->params().hash.L;
    s->codes.resize((size_t)kG * kSteps * L);
    for (int t = 0; t < kSteps; ++t)
        for (int j = 0; j < kG; ++j) s->mp->tables().codes(s->head.query(j, t), s->codes.data() + ((size_t)t * kG + j) * L);
    return *s;
}

void BM_MagicpigHost(benchmark::State& state) {
    const int n = (int)state.range(0);
    const Setup& s = setup(n);
    const int L = s.mp->params().hash.L;
    const float scale = 1.0f / std::sqrt((float)kD);
    retro::MagicPigScratch scratch;
    std::vector<int32_t> ids;
    std::vector<float> lw;
    double sampled = 0, visited = 0, calls = 0;
    int t = 0;
    for (auto _ : state) {
        for (int j = 0; j < kG; ++j) {
            const float* q = s.head.query(j, t);
            ids.clear(), lw.clear();
            visited += (double)s.mp->sample(q, s.codes.data() + ((size_t)t * kG + j) * L, scratch, ids, lw);
            const retro::PartialAttention p = retro::partial_attention_ids(
                q, s.head.keys.data(), s.head.values.data(), std::span<const int32_t>(ids), kD, scale, lw.data());
            benchmark::DoNotOptimize(p.l);
            sampled += (double)ids.size();
            calls += 1;
        }
        t = (t + 1) % kSteps;
    }
    state.counters["sampled"] = sampled / calls;
    state.counters["visited"] = visited / calls;
    state.counters["frac"] = sampled / calls / n;
}

}  // namespace

BENCHMARK(BM_MagicpigHost)->Arg(32768)->Arg(131072)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
