// Checks of the segmented k-means kernels (registry.hpp): kmeans_assign against
// assign_max_inner_product, segmented_kmeans_gpu against segmented_kmeans. Host code only.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cluster/kmeans.hpp"
#include "common/check_util.hpp"
#include "common/registry.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

using namespace check_util;

// ---------------------------------------------------------------------------------------------------
// k-means
// ---------------------------------------------------------------------------------------------------

// Rows drawn around `centers` random directions (so assignments are well separated, as real keys are
// far from uniform) plus a common offset (what centering removes).
std::vector<float> clustered_rows(int n, int d, int centers, std::mt19937& rng) {
    const auto cen = random_float((size_t)centers * d, rng, 1.0f);
    const auto off = random_float((size_t)d, rng, 2.0f);
    std::normal_distribution<float> noise(0.0f, 0.3f);
    std::uniform_int_distribution<int> pick(0, centers - 1);
    std::vector<float> x((size_t)n * d);
    for (int i = 0; i < n; ++i) {
        const int j = pick(rng);
        for (int e = 0; e < d; ++e) x[(size_t)i * d + e] = cen[(size_t)j * d + e] + off[(size_t)e] + noise(rng);
    }
    return x;
}

double dot(const float* a, const float* b, int d) {
    double s = 0;
    for (int e = 0; e < d; ++e) s += (double)a[e] * b[e];
    return s;
}

void check_kmeans_assign(Checker& c) {
    struct Case { int n, k, d, S; };
    const Case cases[] = {{1, 1, 32, 1}, {3000, 100, 128, 1}, {5000, 300, 128, 3}, {777, 50, 256, 2}, {2048, 64, 64, 4}};
    std::mt19937 rng(2024);
    for (const Case& k : cases) {
        const auto x = random_float((size_t)k.n * k.d, rng);
        const auto cen = random_float((size_t)k.k * k.d, rng);
        KMeansParams kp;
        kp.k = k.k, kp.segment = k.S == 1 ? 0 : (k.n + k.S - 1) / k.S;
        const KMeansPlan plan = kmeans_plan(k.n, kp);
        const int S = plan.segments();
        auto dx = upload(x);
        auto dc = upload(cen);
        auto drb = upload(plan.row_begin), dcb = upload(plan.cluster_begin);
        DeviceBuffer<int32_t> da((size_t)k.n);
        for (const int radius : {0, 1, -1}) {
            poison(da);
            kmeans_assign(dx.get(), k.n, k.d, dc.get(), plan.k, drb.get(), dcb.get(), S, radius, da.get());
            synchronize();
            const auto got = download(da);
            std::vector<int32_t> ref((size_t)k.n);
            for (int s = 0; s < S; ++s) {
                const int r0 = plan.row_begin[s], ns = plan.row_begin[s + 1] - r0;
                const int c0 = radius < 0 ? 0 : plan.cluster_begin[std::max(0, s - radius)];
                const int ks = (radius < 0 ? plan.k : plan.cluster_begin[std::min(S, s + radius + 1)]) - c0;
                assign_max_inner_product(x.data() + (size_t)r0 * k.d, ns, cen.data() + (size_t)c0 * k.d, ks, k.d,
                                         ref.data() + r0);
                for (int i = 0; i < ns; ++i) ref[(size_t)r0 + i] += c0;
            }
            // a different pick is fine only when its inner product ties the reference's (float order)
            int diff = 0, bad = 0;
            for (int i = 0; i < k.n; ++i) {
                const int g = got[(size_t)i], r = ref[(size_t)i];
                if (g == r) continue;
                ++diff;
                const float* xi = x.data() + (size_t)i * k.d;
                const double best = dot(xi, cen.data() + (size_t)r * k.d, k.d);
                if (g < 0 || g >= plan.k || dot(xi, cen.data() + (size_t)g * k.d, k.d) < best - 1e-4 * (std::fabs(best) + 1))
                    ++bad;
            }
            const std::string tag = fmt("n=%g k=%g d=%g S=%g radius=%g", k.n, k.k, k.d, S, radius);
            c.expect(bad == 0, tag + fmt(": %g rows assigned to a worse centroid", bad));
            if (diff) c.note(tag + fmt(": %g rows differ by a tie", diff));
        }
    }
}

void check_kmeans_full(Checker& c) {
    struct Case { int n, d, segment; double tpc; int iters; };
    const Case cases[] = {{4096, 128, 1024, 16, 10}, {3000, 64, 0, 32, 5}, {2000, 128, 500, 16, 1}};
    std::mt19937 rng(31337);
    for (const Case& k : cases) {
        const auto x = clustered_rows(k.n, k.d, 40, rng);
        KMeansParams kp;
        kp.segment = k.segment, kp.tokens_per_cluster = k.tpc, kp.iters = k.iters;
        const KMeansResult ref = segmented_kmeans(x.data(), k.n, k.d, kp);
        const KMeansResult got = segmented_kmeans_gpu(x.data(), k.n, k.d, kp);
        const std::string tag = fmt("n=%g d=%g segment=%g iters=%g", k.n, k.d, k.segment, k.iters);
        c.expect(got.k == ref.k && got.assign.size() == ref.assign.size(), tag + ": shape");
        if (got.k != ref.k) continue;
        int same = 0;
        for (int i = 0; i < k.n; ++i) same += got.assign[(size_t)i] == ref.assign[(size_t)i];
        // Objective: mean squared distance to the assigned (final, un-normalized) centroid.
        auto objective = [&](const KMeansResult& r) {
            double s = 0;
            for (int i = 0; i < k.n; ++i) {
                const float* ci = r.centroids.data() + (size_t)r.assign[(size_t)i] * k.d;
                for (int e = 0; e < k.d; ++e) {
                    const double t = x[(size_t)i * k.d + e] - ci[e];
                    s += t * t;
                }
            }
            return s / k.n;
        };
        const double og = objective(got), orf = objective(ref);
        c.note(tag + fmt(": assignments equal %g / %g, objective gpu %g cpu %g", same, k.n, og, orf));
        // The trajectories only part on float-order ties, so nearly all rows agree and the objective
        // matches closely; a wrong update (say, not normalized) changes both by far more.
        c.expect(same >= 0.97 * k.n, tag + ": fewer than 97% of the assignments agree with the CPU");
        c.expect(std::fabs(og - orf) <= 0.01 * orf, tag + ": objective differs by more than 1%");
        c.expect(std::accumulate(got.sizes.begin(), got.sizes.end(), 0) == k.n, tag + ": sizes sum to n");
    }
}

}  // namespace

RETRO_KERNEL_CHECKS(kmeans, 40, {{"KMeansAssign", check_kmeans_assign}, {"KMeansSegmented", check_kmeans_full}});

}  // namespace retro::cuda
