// Checks of PQCache's kernels (registry.hpp): pq_scores against the CPU twin's lookup tables and
// asymmetric-distance sums (ProductQuantizer::inner_product_table, lib/methods/pq_head's pq_adc_scores),
// value for value and bit for bit; pq_select against the CPU twin's ranking (pq_group_scores, or the head's
// own scores with per_head) and top-k (top_k_indices, ties to the lower position), id for id in the
// method's order: the GPU must retrieve exactly what the method `pq` retrieves. Host code.
#include <algorithm>
#include <cstring>
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

}  // namespace

RETRO_KERNEL_CHECKS(pq, 26, {{"PqScores", check_scores}, {"PqSelect", check_select}});

}  // namespace retro::cuda
