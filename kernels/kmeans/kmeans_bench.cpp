// Microbenchmarks of the segmented k-means kernels (registry.hpp), group kmeans: the assignment kernel
// and the whole GPU k-means of one KV head's 32K prompt keys (the wave index build).
#include <chrono>
#include <random>
#include <vector>

#include "cluster/kmeans.hpp"
#include "common/bench_util.hpp"
#include "common/registry.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

using namespace bench_util;

std::vector<BenchRow> kmeans_benches(const BenchContext& ctx) {
    if (!ctx.want("kmeans")) return {};
    const DeviceCeilings& c = ctx.ceilings;
    const int reps = ctx.reps;
    std::vector<BenchRow> rows;
    std::mt19937 rng(5);
    const int n = ctx.options.quick ? 8192 : 32768, d = kD;
    std::normal_distribution<float> nd;
    std::vector<float> x((size_t)n * d);
    for (auto& v : x) v = nd(rng);
    KMeansParams kp;  // defaults: 16 tokens per cluster, segments of 8192 rows, 10 passes
    const KMeansPlan plan = kmeans_plan(n, kp);
    const int S = plan.segments(), ks = plan.k / S;
    auto dx = upload(x);
    auto dc = upload(std::vector<float>(x.begin(), x.begin() + (size_t)plan.k * d));
    auto drb = upload(plan.row_begin), dcb = upload(plan.cluster_begin);
    DeviceBuffer<int32_t> da((size_t)n);
    const double us = median_us(
        [&] { kmeans_assign(dx.get(), n, d, dc.get(), plan.k, drb.get(), dcb.get(), S, 0, da.get()); }, reps);
    BenchRow a;
    a.name = "kmeans_assign", a.params = shape("n=%ld d=%ld k=%ld segments=%ld", n, d, plan.k, S);
    a.time_us = us, a.flops = 2.0 * n * d * ks, a.rate = a.flops / (us * 1e-6), a.unit = "FLOP/s";
    a.ceiling = c.fp32_flop_per_s, a.ceiling_name = "FP32 FMA peak";
    a.fraction = a.ceiling > 0 ? a.rate / a.ceiling : 0;
    rows.push_back(a);
    const auto t0 = std::chrono::steady_clock::now();
    segmented_kmeans_gpu(x.data(), n, d, kp);
    const double wall = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    BenchRow f;
    f.name = "kmeans_segmented_gpu", f.params = a.params + " iters=10 (host wall time incl. copies)";
    f.time_us = wall, f.flops = 2.0 * n * d * ks * (kp.iters - 1) + 2.0 * n * d * plan.k;
    f.rate = f.flops / (wall * 1e-6), f.unit = "FLOP/s", f.ceiling = c.fp32_flop_per_s;
    f.ceiling_name = "FP32 FMA peak", f.fraction = f.ceiling > 0 ? f.rate / f.ceiling : 0;
    rows.push_back(f);
    return rows;
}

}  // namespace

RETRO_KERNEL_BENCHES(kmeans, 40, {{"kmeans", kmeans_benches}});

}  // namespace retro::cuda
