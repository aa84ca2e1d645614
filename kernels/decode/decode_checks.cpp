// Check of flash-decoding (registry.hpp): decode_attention against partial_attention_ids + merge. Its
// reference and inputs (decode_reference.hpp) serve the library baselines' checks too. Host code only.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "common/check_util.hpp"
#include "common/registry.hpp"
#include "cuda_api.hpp"
#include "decode/decode_reference.hpp"

namespace retro::cuda {

namespace check_util {

// ---------------------------------------------------------------------------------------------------
// decode_attention vs partial_attention_ids + merge
// ---------------------------------------------------------------------------------------------------

// The reference of decode_attention and LibraryDecode: per (b, kv head) and query head, attention over the
// first lens[bk] tokens of K, V: [B*Hkv, cap, d] (partial_attention_ids), merged with the extra (out, lse)
// partial when xo/xl are given (as m = lse, l = 1, acc = out). rout: [B, Hkv*g, d], rlse: [B, Hkv*g].
void reference_decode(const std::vector<float>& q, const Half& K, const Half& V, const std::vector<int32_t>& lens,
                      int B, int Hkv, int g, int cap, int d, const std::vector<float>* xo,
                      const std::vector<float>* xl, std::vector<float>& rout, std::vector<float>& rlse) {
    const int Hq = Hkv * g;
    rout.assign((size_t)B * Hq * d, 0.0f), rlse.assign((size_t)B * Hq, 0.0f);
    for (int bk = 0; bk < B * Hkv; ++bk) {
        const int b = bk / Hkv, kvh = bk % Hkv;
        std::vector<int32_t> ids((size_t)lens[(size_t)bk]);
        std::iota(ids.begin(), ids.end(), 0);
        for (int h = 0; h < g; ++h) {
            const size_t qh = (size_t)b * Hq + (size_t)kvh * g + h;
            PartialAttention p = partial_attention_ids(q.data() + qh * d, K.f.data() + (size_t)bk * cap * d,
                                                       V.f.data() + (size_t)bk * cap * d, ids, d, scale_of(d));
            if (xl && std::isfinite((*xl)[qh])) {
                PartialAttention e(d);
                e.m = (*xl)[qh], e.l = 1.0;
                for (int j = 0; j < d; ++j) e.acc[(size_t)j] = (*xo)[qh * d + j];
                merge(p, e);
            }
            p.output(rout.data() + qh * d);
            rlse[qh] = (float)p.lse();
        }
    }
}

DecodeInputs decode_inputs(int B, int Hkv, int g, int cap, int d, float qsigma, std::mt19937& rng) {
    DecodeInputs x;
    x.s.batch = B, x.s.kv_heads = Hkv, x.s.group = g, x.s.d = d, x.s.capacity = cap;
    x.nbk = B * Hkv, x.Hq = Hkv * g;
    x.q = random_float((size_t)B * x.Hq * d, rng, qsigma);
    x.K = random_half((size_t)x.nbk * cap * d, rng);
    x.V = random_half((size_t)x.nbk * cap * d, rng);
    x.tag = fmt("B=%g Hkv=%g g=%g cap=%g d=%g", B, Hkv, g, cap, d);
    return x;
}

}  // namespace check_util

namespace {

using namespace check_util;

void check_decode(Checker& c) {
    struct Case { int B, Hkv, g, cap, split, d; bool lens, extra; float qsigma; };
    const Case cases[] = {{1, 1, 1, 1, 512, 128, false, false, 1.0f},    {2, 2, 4, 1000, 128, 128, true, false, 2.0f},
                          {1, 2, 8, 5000, 512, 64, false, true, 1.0f},   {1, 1, 4, 3000, 256, 256, true, true, 3.0f},
                          {3, 1, 4, 700, 100, 128, true, true, 1.0f},    {1, 8, 4, 9000, 512, 128, false, false, 1.0f}};
    std::mt19937 rng(99);
    for (const Case& k : cases) {
        DecodeInputs x = decode_inputs(k.B, k.Hkv, k.g, k.cap, k.d, k.qsigma, rng);
        DecodeShape& s = x.s;
        s.split = k.split;
        const int nbk = x.nbk, Hq = x.Hq;
        const auto& q = x.q;
        const Half &K = x.K, &V = x.V;
        std::vector<int32_t> lens((size_t)nbk, k.cap);
        if (k.lens) {
            std::uniform_int_distribution<int> ld(0, k.cap);
            for (auto& l : lens) l = ld(rng);
            lens[0] = 0;  // an empty execution buffer: only the extra partial (or nothing) remains
        }
        std::vector<float> xo, xl;
        if (k.extra) {
            xo = random_float((size_t)k.B * Hq * k.d, rng);
            xl = random_float((size_t)k.B * Hq, rng, 2.0f);
            xl[1 % xl.size()] = -INFINITY;  // an empty estimation partial
        }
        auto dq = upload(q);
        auto dk = upload(K.bits), dv = upload(V.bits);
        auto dl = upload(lens);
        auto dxo = upload(xo), dxl = upload(xl);
        DeviceBuffer<float> dout((size_t)k.B * Hq * k.d), dlse((size_t)k.B * Hq), dw(decode_workspace_floats(s));
        poison(dout), poison(dlse), poison(dw);
        decode_attention(s, dq.get(), dk.get(), dv.get(), k.lens ? dl.get() : nullptr, k.extra ? dxo.get() : nullptr,
                         k.extra ? dxl.get() : nullptr, dout.get(), dlse.get(), dw.get());
        synchronize();
        const auto out = download(dout), lse = download(dlse);

        std::vector<float> rout, rlse;
        reference_decode(q, K, V, lens, k.B, k.Hkv, k.g, k.cap, k.d, k.extra ? &xo : nullptr, k.extra ? &xl : nullptr,
                         rout, rlse);
        const std::string tag = x.tag + fmt(" split=%g lens=%g extra=%g", k.split, k.lens, k.extra);
        c.expect_close(tag + " out", out.data(), rout.data(), out.size(), kTolAttention);
        c.expect_close(tag + " lse", lse.data(), rlse.data(), lse.size(), kTolLse);
    }
}

// decode_attention_pages: each sequence's tokens through a random page table over a pool of pages (pages
// shared by sequences, out of order, the last page partial) against the reference over the gathered rows.
void check_decode_pages(Checker& c) {
    struct Case { int B, Hkv, g, page, pool_pages, stride, d; };
    const Case cases[] = {{1, 1, 1, 16, 8, 3, 128}, {2, 3, 4, 16, 40, 9, 64}, {1, 2, 8, 32, 20, 12, 256}, {3, 1, 2, 5, 30, 7, 128}};
    std::mt19937 rng(7);
    for (const Case& k : cases) {
        const int nbk = k.B * k.Hkv, cap = k.page * k.stride;
        DecodeInputs x = decode_inputs(k.B, k.Hkv, k.g, k.page * k.pool_pages, k.d, 1.5f, rng);
        DecodeShape s = x.s;  // q: [B, Hkv*g, d]; K, V: the pool, pool_pages * page rows
        s.capacity = cap, s.split = 3 * k.page;
        std::uniform_int_distribution<int> pd(0, k.pool_pages - 1), ld(1, cap);
        std::vector<int32_t> table((size_t)nbk * k.stride), lens((size_t)nbk);
        for (auto& p : table) p = pd(rng);
        for (auto& l : lens) l = ld(rng);
        lens[0] = cap;  // a full table
        // the reference: every sequence's rows gathered in table order, [nbk, cap, d]
        Half gk, gv;
        gk.f.assign((size_t)nbk * cap * k.d, 0.0f), gv.f.assign(gk.f.size(), 0.0f);
        for (int bk = 0; bk < nbk; ++bk)
            for (int t = 0; t < cap; ++t) {
                const size_t row = (size_t)table[(size_t)bk * k.stride + t / k.page] * k.page + t % k.page;
                std::copy_n(x.K.f.begin() + (long)(row * k.d), k.d, gk.f.begin() + ((long)bk * cap + t) * k.d);
                std::copy_n(x.V.f.begin() + (long)(row * k.d), k.d, gv.f.begin() + ((long)bk * cap + t) * k.d);
            }
        auto dq = upload(x.q);
        auto dk = upload(x.K.bits), dv = upload(x.V.bits);
        auto dt = upload(table), dl = upload(lens);
        DeviceBuffer<float> dout((size_t)k.B * x.Hq * k.d), dlse((size_t)k.B * x.Hq), dw(decode_workspace_floats(s));
        poison(dout), poison(dlse), poison(dw);
        decode_attention_pages(s, dq.get(), dk.get(), dv.get(), dt.get(), k.page, k.stride, dl.get(), dout.get(),
                               dlse.get(), dw.get());
        synchronize();
        const auto out = download(dout), lse = download(dlse);
        std::vector<float> rout, rlse;
        reference_decode(x.q, gk, gv, lens, k.B, k.Hkv, k.g, cap, k.d, nullptr, nullptr, rout, rlse);
        const std::string tag = x.tag + fmt(" page=%g stride=%g", k.page, k.stride);
        c.expect_close(tag + " out", out.data(), rout.data(), out.size(), kTolAttention);
        c.expect_close(tag + " lse", lse.data(), rlse.data(), lse.size(), kTolLse);
    }
}

}  // namespace

RETRO_KERNEL_CHECKS(decode, 20, {{"DecodeAttention", check_decode}, {"DecodeAttentionPages", check_decode_pages}});

}  // namespace retro::cuda
