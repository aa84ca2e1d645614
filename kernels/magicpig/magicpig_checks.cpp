// Checks of MagicPIG's GPU part (registry.hpp): magicpig_hash against the CPU twin's SimHash tables
// (lib/cluster/simhash, SimHashTables::codes: what the method `magicpig` hashes each query with), code for
// code and bit for bit: the GPU must hash each query into exactly the buckets the method does, so the host's
// collision test and sampling (the method's own code) see the same candidates. Host code.
#include <random>
#include <string>
#include <vector>

#include "cluster/simhash.hpp"
#include "common/check_util.hpp"
#include "common/registry.hpp"
#include "core/half.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

using namespace check_util;

enum class Queries { random, half, keys, zeros };

struct HashCase {
    int seqs, heads, g, d, K, L;
    Queries q;
};

void check_hash(Checker& c) {
    // (seqs, heads, g, d, K, L, queries)
    const HashCase cases[] = {
        {2, 2, 4, 128, 10, 150, Queries::random},  // MagicPIG's default (K=10, L=150), two KV heads
        {4, 2, 4, 128, 10, 150, Queries::half},    // two replicas of two KV heads, fp16-valued queries
        {1, 1, 8, 128, 9, 120, Queries::keys},     // CTKVR's (9, 120): the queries are keys (their own buckets)
        {3, 3, 2, 64, 8, 75, Queries::random},     // (8, 75), d 64
        {2, 1, 1, 256, 30, 7, Queries::random},    // the widest code, few tables
        {1, 1, 4, 128, 0, 5, Queries::random},     // K = 0: every code 0
        {2, 2, 4, 128, 10, 300, Queries::zeros},   // zero queries: every projection 0, not > 0
        {1, 1, 2, 128, 1, 1000, Queries::random},  // many one-bit tables (several blocks of tables)
    };
    std::mt19937 rng(17);
    for (const HashCase& k : cases) {
        MagicpigShape s;
        s.seqs = k.seqs, s.heads = k.heads, s.group = k.g, s.d = k.d, s.K = k.K, s.L = k.L;
        const int n = 200;
        std::vector<SimHashTables> tables((size_t)k.heads);
        std::vector<std::vector<float>> keys((size_t)k.heads);
        std::vector<float> planes;
        for (int h = 0; h < k.heads; ++h) {
            keys[(size_t)h] = random_float((size_t)n * k.d, rng);
            SimHashParams p;
            p.K = k.K, p.L = k.L, p.seed = 1000u + (unsigned)h;
            tables[(size_t)h].build(keys[(size_t)h].data(), n, k.d, p);
            const float* w = tables[(size_t)h].planes();
            planes.insert(planes.end(), w, w + (size_t)k.d * s.KL());
        }
        std::vector<float> q = random_float((size_t)s.queries() * k.d, rng, 1.5f);
        for (int qh = 0; qh < s.queries(); ++qh) {
            float* x = q.data() + (size_t)qh * k.d;
            const int set = (qh / k.g) % k.heads;
            for (int e = 0; e < k.d; ++e) {
                if (k.q == Queries::half) x[e] = half_to_float(float_to_half(x[e]));
                if (k.q == Queries::keys) x[e] = keys[(size_t)set][(size_t)(qh % n) * k.d + e];
                if (k.q == Queries::zeros) x[e] = 0.0f;
            }
        }
        if (planes.empty()) planes.push_back(0.0f);  // K = 0: no hyperplanes, an allocation all the same
        auto dq = upload(q);
        auto dp = upload(planes);
        DeviceBuffer<uint32_t> dc((size_t)s.queries() * k.L);
        poison(dc);
        magicpig_hash(s, dq.get(), dp.get(), dc.get());
        synchronize();
        const auto got = download(dc);
        std::vector<uint32_t> want((size_t)k.L);
        size_t wrong = 0, ones = 0;
        for (int qh = 0; qh < s.queries(); ++qh) {
            tables[(size_t)((qh / k.g) % k.heads)].codes(q.data() + (size_t)qh * k.d, want.data());
            for (int t = 0; t < k.L; ++t) {
                wrong += got[(size_t)qh * k.L + t] != want[(size_t)t];
                ones += want[(size_t)t] != 0;
            }
        }
        const std::string tag = fmt("magicpig_hash seqs=%g heads=%g g=%g d=%g K=%g", k.seqs, k.heads, k.g, k.d, k.K) +
                                fmt(" L=%g", k.L);
        c.expect(wrong == 0, tag + fmt(": %g of %g codes differ from SimHashTables::codes'", (double)wrong,
                                       (double)s.queries() * k.L));
        c.note(tag + fmt(": %g codes compared bit for bit (%g non-zero)", (double)s.queries() * k.L, (double)ones));
    }
}

}  // namespace

RETRO_KERNEL_CHECKS(magicpig, 27, {{"MagicpigHash", check_hash}});

}  // namespace retro::cuda
