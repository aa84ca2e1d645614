// Checks of PQCache's kernels (registry.hpp): pq_scores against the CPU twin's lookup tables and
// asymmetric-distance sums (ProductQuantizer::inner_product_table, lib/methods/pq_head's pq_adc_scores),
// value for value and bit for bit; pq_select against the CPU twin's ranking (pq_group_scores, or the head's
// own scores with per_head) and top-k (top_k_indices, ties to the lower position), id for id in the
// method's order: the GPU must retrieve exactly what the method `pq` retrieves. Host code.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cluster/pq.hpp"
#include "common/check_util.hpp"
#include "common/registry.hpp"
#include "core/top_k.hpp"
#include "cuda_api.hpp"
#include "methods/pq_head.hpp"

namespace retro::cuda {

namespace {

using namespace check_util;

struct PqCase {
    int seqs, g, d, m, nbits, capacity, coded;
    PqGqa gqa;
    bool ties;  ///< the codes repeat every 7 tokens: scores tie, the rule "ties to the lower position" decides
    int sink, local, k;
};

PqShape shape_of(const PqCase& k) {
    PqShape s;
    s.seqs = k.seqs, s.group = k.g, s.d = k.d, s.m = k.m, s.nbits = k.nbits, s.capacity = k.capacity;
    s.rank = k.gqa == PqGqa::per_head ? PqRank::per_head : k.gqa == PqGqa::mean ? PqRank::sum : PqRank::max;
    return s;
}

/// Every sequence's own quantizer (trained on its random keys, as the method's build) and codes.
struct PqInputs {
    std::vector<ProductQuantizer> pq;  ///< [seqs]
    std::vector<float> codebooks;      ///< [seqs, m, ksub, dsub]
    std::vector<uint16_t> codes;       ///< [seqs, capacity, m]
    std::vector<float> q;              ///< [seqs * g, d]
};

PqInputs pq_inputs(const PqCase& k, std::mt19937& rng) {
    const PqShape s = shape_of(k);
    PqInputs in;
    in.codes.assign((size_t)s.seqs * s.capacity * s.m, 0);
    for (int seq = 0; seq < s.seqs; ++seq) {
        PQParams qp;
        qp.m = k.m, qp.nbits = k.nbits, qp.iters = 3, qp.seed = 1u + seq;
        in.pq.emplace_back(k.d, qp);
        const std::vector<float> x = random_float((size_t)k.capacity * k.d, rng);
        in.pq.back().train(x.data(), k.capacity);
        uint16_t* c = in.codes.data() + (size_t)seq * s.capacity * s.m;
        in.pq.back().encode(x.data(), k.capacity, c);
        if (k.ties)
            for (int i = 7; i < k.capacity; ++i) std::copy_n(c + (size_t)(i % 7) * s.m, s.m, c + (size_t)i * s.m);
        const float* cb = in.pq.back().centroids(0);  // [m, ksub, dsub], contiguous
        in.codebooks.insert(in.codebooks.end(), cb, cb + (size_t)s.m * s.ksub() * s.dsub());
    }
    in.q = random_float((size_t)s.seqs * s.group * s.d, rng, 1.5f);
    return in;
}

/// The CPU twin's tables [seqs * g, m, ksub] and scores [seqs * g, coded].
void reference_scores(const PqCase& k, const PqInputs& in, std::vector<float>& lut, std::vector<float>& scores) {
    const PqShape s = shape_of(k);
    const size_t entries = (size_t)s.m * s.ksub();
    lut.assign((size_t)s.seqs * s.group * entries, 0.0f);
    scores.assign((size_t)s.seqs * s.group * k.coded, 0.0f);
    for (int qh = 0; qh < s.seqs * s.group; ++qh) {
        const int seq = qh / s.group;
        in.pq[(size_t)seq].inner_product_table(in.q.data() + (size_t)qh * s.d, lut.data() + qh * entries);
        pq_adc_scores(lut.data() + qh * entries, s.m, s.ksub(), in.codes.data() + (size_t)seq * s.capacity * s.m,
                      k.coded, scores.data() + (size_t)qh * k.coded);
    }
}

size_t bits_differ(const float* a, const float* b, size_t n) {
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += std::memcmp(a + i, b + i, sizeof(float)) != 0;
    return wrong;
}

void check_scores(Checker& c) {
    // (seqs, g, d, m, nbits, capacity, coded, gqa, ties, sink, local, k)
    const PqCase cases[] = {
        {2, 4, 128, 2, 6, 700, 700, PqGqa::max, false, 0, 0, 0},   // PQCache's LongBench setting
        {1, 8, 128, 4, 8, 900, 611, PqGqa::max, false, 0, 0, 0},   // its InfiniteBench setting, part coded
        {3, 1, 64, 8, 4, 300, 300, PqGqa::max, false, 0, 0, 0},    // one query head, many sub-spaces
        {1, 2, 256, 1, 7, 400, 1, PqGqa::max, false, 0, 0, 0},     // one sub-space, one coded token
        {2, 4, 128, 2, 6, 100, 0, PqGqa::max, false, 0, 0, 0},     // nothing coded: the tables alone
    };
    std::mt19937 rng(3);
    for (const PqCase& k : cases) {
        const PqShape s = shape_of(k);
        const PqInputs in = pq_inputs(k, rng);
        auto dq = upload(in.q);
        auto dcb = upload(in.codebooks);
        auto dc = upload(in.codes);
        DeviceBuffer<float> dl((size_t)s.seqs * s.group * s.m * s.ksub()), ds((size_t)s.seqs * s.group * s.capacity);
        poison(dl), poison(ds);
        pq_scores(s, dq.get(), dcb.get(), dc.get(), k.coded, dl.get(), ds.get());
        synchronize();
        const auto lut = download(dl), sc = download(ds);
        std::vector<float> rlut, rsc;
        reference_scores(k, in, rlut, rsc);
        const size_t wrong_lut = bits_differ(lut.data(), rlut.data(), rlut.size());
        size_t wrong_sc = 0;
        for (int qh = 0; qh < s.seqs * s.group; ++qh)
            wrong_sc += bits_differ(sc.data() + (size_t)qh * s.capacity, rsc.data() + (size_t)qh * k.coded, (size_t)k.coded);
        const std::string tag = fmt("pq_scores seqs=%g g=%g d=%g m=%g nbits=%g", k.seqs, k.g, k.d, k.m, k.nbits);
        c.expect(wrong_lut == 0, tag + fmt(": %g of %g table entries differ from inner_product_table's", (double)wrong_lut,
                                           (double)rlut.size()));
        c.expect(wrong_sc == 0, tag + fmt(" coded=%g: %g of %g scores differ from pq_adc_scores'", k.coded,
                                          (double)wrong_sc, (double)rsc.size()));
        c.note(tag + fmt(" coded=%g: tables and scores compared bit for bit", k.coded));
    }
}

void check_select(Checker& c) {
    // (seqs, g, d, m, nbits, capacity, coded, gqa, ties, sink, local, k)
    const PqCase cases[] = {
        {2, 4, 128, 2, 6, 1200, 1100, PqGqa::max, false, 4, 64, 40},       // few of many (the CPU's heap path)
        {2, 4, 128, 2, 6, 1200, 1100, PqGqa::max, true, 4, 64, 40},        // ties everywhere
        {1, 4, 128, 2, 6, 1000, 1000, PqGqa::mean, false, 4, 64, 300},     // many of many (nth_element path)
        {2, 2, 64, 4, 5, 600, 577, PqGqa::mean, true, 0, 1, 200},          // no sink, ties
        {2, 4, 128, 2, 6, 800, 800, PqGqa::per_head, false, 4, 64, 160},   // a list per query head
        {1, 8, 64, 2, 4, 700, 650, PqGqa::per_head, true, 4, 30, 33},      // per head, ties
        {1, 4, 128, 2, 6, 500, 500, PqGqa::max, false, 4, 64, 500},        // every coded token
        {2, 4, 128, 2, 6, 500, 300, PqGqa::max, false, 4, 64, 0},          // nothing retrieved: static only
        {1, 1, 256, 2, 6, 3000, 2999, PqGqa::max, false, 4, 64, 2999},     // a long sort, all of it
    };
    std::mt19937 rng(11);
    for (const PqCase& k : cases) {
        const PqShape s = shape_of(k);
        const PqInputs in = pq_inputs(k, rng);
        PqLists l;
        l.sink_end = k.sink, l.coded_end = k.sink + k.coded, l.n = l.coded_end + k.local, l.k = k.k;
        l.kv_rows = l.n + 5, l.width = l.sink_end + k.local + k.k + 3;
        auto dq = upload(in.q);
        auto dcb = upload(in.codebooks);
        auto dc = upload(in.codes);
        DeviceBuffer<float> dl((size_t)s.seqs * s.group * s.m * s.ksub()), ds((size_t)s.seqs * s.group * s.capacity);
        DeviceBuffer<int32_t> dt((size_t)s.lists() * l.width), dn((size_t)s.lists());
        DeviceBuffer<uint8_t> scratch(pq_select_scratch_bytes(s));
        poison(dt), poison(dn);
        pq_scores(s, dq.get(), dcb.get(), dc.get(), k.coded, dl.get(), ds.get());
        pq_select(s, ds.get(), l, dt.get(), dn.get(), scratch.get());
        synchronize();
        const auto table = download(dt), lens = download(dn);

        // the CPU twin: its scores, its group ranking, its top-k, its order (PqHead::select, finish)
        std::vector<float> rlut, rsc, agg, ex;
        reference_scores(k, in, rlut, rsc);
        int mismatched = 0;
        for (int list = 0; list < s.lists(); ++list) {
            const int seq = list / s.per();
            const float* sq = rsc.data() + (size_t)seq * s.group * k.coded;
            std::vector<int32_t> top;
            if (k.gqa == PqGqa::per_head) {
                top = top_k_indices(sq + (size_t)(list % s.per()) * k.coded, k.coded, k.k);
            } else {
                pq_group_scores(sq, s.group, k.coded, s.d, k.gqa, agg, ex);
                top = top_k_indices(agg.data(), k.coded, k.k);
            }
            std::vector<int32_t> want;
            for (int t = 0; t < l.sink_end; ++t) want.push_back(t);
            for (int t = l.coded_end; t < l.n; ++t) want.push_back(t);
            for (int32_t i : top) want.push_back(l.sink_end + i);
            bool same = lens[(size_t)list] == (int32_t)want.size();
            for (size_t r = 0; r < want.size() && same; ++r)
                same = table[(size_t)list * l.width + r] == seq * l.kv_rows + want[r];
            mismatched += same ? 0 : 1;
        }
        const std::string tag = fmt("pq_select seqs=%g g=%g coded=%g k=%g", k.seqs, k.g, k.coded, k.k) + " gqa " +
                                pq_gqa_name(k.gqa) + (k.ties ? " (ties)" : "");
        c.expect(mismatched == 0, tag + fmt(": %g of %g lists differ from the CPU twin's tokens", mismatched, s.lists()));
        c.note(tag + fmt(": %g lists compared id for id", s.lists()));
    }
}

// pq_gather_rows against the loop it stands for: every list's rows equal the K and V of its entries, each
// read from where the sources say (static store, pool block, pinned host store), bit for bit; rows past a
// list's length untouched. Per case: lists per sequence, the cache (none, or some units resident in scattered
// blocks) and the store in pinned host memory (zero-copy) or device memory.
void check_gather_rows(Checker& c) {
    struct Case {
        int seqs, per, d, sink, coded_end, n, unit, bt, resident_every;  // resident_every 0: no cache
        bool pinned;
    };
    const Case cases[] = {{2, 1, 128, 4, 900, 964, 128, 16, 2, true},
                          {3, 4, 64, 0, 700, 716, 64, 16, 3, true},
                          {1, 2, 128, 4, 1000, 1064, 128, 8, 0, false},
                          {2, 1, 256, 4, 1200, 1264, 128, 128, 1, false}};
    std::mt19937 rng(5);
    for (const Case& k : cases) {
        PqRowSources s;
        s.seqs = k.seqs, s.per = k.per, s.d = k.d, s.kv_rows = k.n + 7, s.sink_end = k.sink, s.coded_end = k.coded_end;
        s.static_from = k.coded_end - 20, s.static_rows = s.sink_end + s.kv_rows - s.static_from;
        s.unit_tokens = k.unit, s.block_tokens = k.bt;
        const size_t d = (size_t)k.d, lists = (size_t)k.seqs * k.per;
        const Half store_k = random_half((size_t)k.seqs * s.kv_rows * d, rng), store_v = random_half(store_k.bits.size(), rng);
        const Half stat_k = random_half((size_t)k.seqs * s.static_rows * d, rng), stat_v = random_half(stat_k.bits.size(), rng);
        // the cache: every resident_every-th unit resident, its blocks in a shuffled order of the pool
        const int units = s.units(), ub = s.unit_blocks();
        std::vector<int32_t> blocks((size_t)k.seqs * units * ub, -1);
        int used = 0;
        if (k.resident_every > 0)
            for (int seq = 0; seq < k.seqs; ++seq) {
                std::vector<int32_t> free((size_t)units * ub);
                std::iota(free.begin(), free.end(), 0);
                std::shuffle(free.begin(), free.end(), rng);
                int next = 0;
                for (int u = 0; u < units; u += k.resident_every)
                    for (int j = 0; j < ub; ++j) blocks[((size_t)seq * units + u) * ub + j] = free[(size_t)next++];
                used = std::max(used, next);
            }
        s.pool_rows = (int64_t)units * ub * k.bt;
        const Half pool_k = random_half((size_t)k.seqs * s.pool_rows * d, rng), pool_v = random_half(pool_k.bits.size(), rng);
        // the lists: static tokens, then coded ones in a random order (pq_select's layout), lengths varied
        const int width = k.sink + (k.n - k.coded_end) + 300;
        std::vector<int32_t> table(lists * width, -1), lens(lists);
        for (size_t l = 0; l < lists; ++l) {
            const int seq = (int)l / k.per;
            std::vector<int32_t> coded((size_t)(k.coded_end - k.sink));
            std::iota(coded.begin(), coded.end(), k.sink);
            std::shuffle(coded.begin(), coded.end(), rng);
            int r = 0;
            for (int t = 0; t < k.sink; ++t) table[l * width + r++] = seq * s.kv_rows + t;
            for (int t = k.coded_end; t < k.n; ++t) table[l * width + r++] = seq * s.kv_rows + t;
            for (int i = 0; r < width - (int)(l % 3) * 50; ++i) table[l * width + r++] = seq * s.kv_rows + coded[(size_t)i];
            lens[l] = r;
        }
        auto dsk = upload(stat_k.bits), dsv = upload(stat_v.bits), dpk = upload(pool_k.bits), dpv = upload(pool_v.bits);
        auto dbl = upload(blocks), dt = upload(table), dn = upload(lens);
        DeviceBuffer<uint16_t> dstk, dstv;
        PinnedBuffer<uint16_t> pin_k, pin_v;  // freed if the check throws
        uint16_t *hk = nullptr, *hv = nullptr;
        if (k.pinned) {
            pin_k = PinnedBuffer<uint16_t>(store_k.bits.size()), pin_v = PinnedBuffer<uint16_t>(store_v.bits.size());
            hk = pin_k.get(), hv = pin_v.get();
            std::copy(store_k.bits.begin(), store_k.bits.end(), hk);
            std::copy(store_v.bits.begin(), store_v.bits.end(), hv);
        } else {
            dstk = upload(store_k.bits), dstv = upload(store_v.bits);
        }
        s.static_k = dsk.get(), s.static_v = dsv.get();
        s.store_k = k.pinned ? hk : dstk.get(), s.store_v = k.pinned ? hv : dstv.get();
        if (k.resident_every > 0) s.blocks = dbl.get(), s.pool_k = dpk.get(), s.pool_v = dpv.get();
        DeviceBuffer<uint16_t> xk(lists * width * d), xv(lists * width * d);
        poison(xk), poison(xv);
        pq_gather_rows(s, dt.get(), dn.get(), (int)lists, width, xk.get(), xv.get());
        synchronize();
        const auto gk = download(xk), gv = download(xv);
        size_t wrong = 0, untouched = 0, hits = 0, misses = 0;
        std::vector<uint16_t> poisoned(d);
        std::memset(poisoned.data(), kPoisonByte, d * 2);
        for (size_t l = 0; l < lists; ++l) {
            const int seq = (int)l / k.per;
            for (int i = 0; i < width; ++i) {
                const uint16_t* ok = gk.data() + (l * width + i) * d;
                const uint16_t* ov = gv.data() + (l * width + i) * d;
                if (i >= lens[l]) {
                    untouched += std::equal(ok, ok + d, poisoned.data()) && std::equal(ov, ov + d, poisoned.data());
                    continue;
                }
                const int t = table[l * width + i] - seq * s.kv_rows;
                const uint16_t *wk, *wv;
                if (t < k.sink || t >= k.coded_end) {
                    const size_t row = (size_t)seq * s.static_rows + (t < k.sink ? t : k.sink + t - s.static_from);
                    wk = stat_k.bits.data() + row * d, wv = stat_v.bits.data() + row * d;
                } else {
                    const int b = k.resident_every > 0 ? blocks[((size_t)seq * units + t / k.unit) * ub + t % k.unit / k.bt] : -1;
                    const size_t row = b >= 0 ? (size_t)seq * s.pool_rows + (size_t)b * k.bt + t % k.bt
                                              : (size_t)seq * s.kv_rows + t;
                    wk = (b >= 0 ? pool_k : store_k).bits.data() + row * d;
                    wv = (b >= 0 ? pool_v : store_v).bits.data() + row * d;
                    ++(b >= 0 ? hits : misses);
                }
                wrong += !std::equal(ok, ok + d, wk) || !std::equal(ov, ov + d, wv);
            }
        }
        size_t past = 0;
        for (size_t l = 0; l < lists; ++l) past += (size_t)(width - lens[l]);
        const std::string tag = fmt("pq_gather_rows seqs=%g per=%g d=%g unit=%g bt=%g", k.seqs, k.per, k.d, k.unit, k.bt) +
                                (k.resident_every ? fmt(" (every %g-th unit cached)", k.resident_every) : " (no cache)") +
                                (k.pinned ? ", store pinned" : ", store on the device");
        c.expect(wrong == 0, tag + fmt(": %g rows differ from their source's", (double)wrong));
        c.expect(untouched == past, tag + fmt(": %g of %g rows past the lengths were written", (double)(past - untouched), (double)past));
        c.expect(k.resident_every == 0 || (k.resident_every == 1 ? misses == 0 && hits > 0 : hits > 0 && misses > 0),
                 tag + ": the case reads where it was built to (both the pool and the store; all cached: the pool only)");
        c.note(tag + fmt(": %g rows compared bit for bit (%g from the pool, %g from the store)",
                         (double)(hits + misses), (double)hits, (double)misses));
    }
}

}  // namespace

RETRO_KERNEL_CHECKS(pq, 26, {{"PqScores", check_scores}, {"PqSelect", check_select}, {"PqGatherRows", check_gather_rows}});

}  // namespace retro::cuda
