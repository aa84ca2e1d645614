// The CPU-index methods' host part (their GPU twins' split, kernels/run/host_index_layer.cpp; docs/cuda.md
// "faiss_flat, faiss_ivf, faiss_hnsw, retrieval_attention"): for one KV head and one decode step, the method's
// own select (its index search for the group's 4 query heads) and the attention over each list's retrieved
// tokens (partial_attention_ids, float32 KV in host memory), one thread — what each worker of the layer run's
// host pool does per (replica, KV head). The methods at the 32K closed-loop grid's middle budget
// (configs/gpu/every-method.json: k 1,532 retrieved + 4 sink + 64 window tokens; FAISS with placement
// "cpu_attention"), every other parameter at its default; prompts of 32K and 128K tokens, d = 128.
// Keys: the method tests' blob heads (tests/unit/method_harness.hpp, 24 clusters, wide noise: the GPU twins'
// backend test's setting) with 64 prefill queries per query head (RetrievalAttention's training queries):
// a synthetic stand-in, so the searches' work is this data's. The index is built once per (method, length),
// outside the timing. Counters (per query head): retrieved (tokens attended on the host), scan (vectors the
// search compared, the method's scan_ops / group).
#include <benchmark/benchmark.h>

#include <cmath>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention/attention.hpp"
#include "method_harness.hpp"  // tests/unit: blob_head, context_of
#include "methods/params.hpp"

namespace {

constexpr int kD = 128, kG = 4, kSteps = 4, kSink = 4, kWindow = 64;
const char* const kMethods[] = {"faiss_ivf", "faiss_hnsw", "retrieval_attention"};

struct Setup {
    retro::HeadSlice head;
    std::unique_ptr<retro::Method> method;
};

const Setup& setup(int which, int n) {
    static std::map<std::pair<int, int>, std::unique_ptr<Setup>> cache;
    auto& s = cache[{which, n}];
    if (s) return *s;
    s = std::make_unique<Setup>();
    s->head = retro::method_test::blob_head({.prompt_len = n, .steps = kSteps, .d = kD, .group = kG, .seed = 31,
                                             .centers = 24, .center_scale = 1.0f, .offset_scale = 1.0f,
                                             .key_noise = 1.5f, .query_scale = 1.5f, .query_noise = 1.5f,
                                             .prefill = 64});
    const std::string name = kMethods[which];
    nlohmann::json given = {{"k", 1532}, {"sink", kSink}, {"window", kWindow}};
    if (name != "retrieval_attention") given["placement"] = "cpu_attention";
    const retro::MethodInfo& info = retro::find_method(name);
    s->method = info.make(retro::resolve_params(info, given));
    s->method->build(retro::method_test::context_of(s->head),
                     retro::KVView{s->head.keys.data(), s->head.values.data(), n, kD});
    return *s;
}

void BM_HostIndex(benchmark::State& state) {
    const int which = (int)state.range(0), n = (int)state.range(1);
    const Setup& s = setup(which, n);
    state.SetLabel(kMethods[which]);
    const float scale = 1.0f / std::sqrt((float)kD);
    const int ib = std::min(kSink, n), ie = std::max(ib, n - kWindow);
    retro::Selection sel;
    std::vector<float> q((size_t)kG * kD);
    std::vector<int32_t> ids;
    double retrieved = 0, scan = 0, calls = 0;
    int t = 0;
    for (auto _ : state) {
        for (int j = 0; j < kG; ++j) std::copy(s.head.query(j, t), s.head.query(j, t) + kD, q.begin() + (ptrdiff_t)j * kD);
        const retro::KVView kv{s.head.keys.data(), s.head.values.data(), n + t + 1, kD};
        sel.clear();
        s.method->select(q.data(), t, kv, sel);
        for (int j = 0; j < kG; ++j) {
            ids.clear();
            for (int32_t id : sel.exact_for(j))
                if (id >= ib && id < ie) ids.push_back(id);  // the static pattern is the GPU's
            const retro::PartialAttention p = retro::partial_attention_ids(
                q.data() + (size_t)j * kD, s.head.keys.data(), s.head.values.data(), std::span<const int32_t>(ids), kD, scale);
            benchmark::DoNotOptimize(p.l);
            retrieved += (double)ids.size();
        }
        scan += sel.scan_ops / kG;
        calls += 1;
        t = (t + 1) % kSteps;
    }
    state.counters["retrieved"] = retrieved / calls / kG;
    state.counters["scan"] = scan / calls;
}

}  // namespace

BENCHMARK(BM_HostIndex)
    ->ArgsProduct({{0, 1, 2}, {32768, 131072}})
    ->ArgNames({"method", "n"})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
