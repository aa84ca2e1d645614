// Checks of the library baselines (registry.hpp): LibraryDecode (FlashInfer) and CudnnDecode against
// the full-attention reference of decode_reference.hpp. Host code only.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/check_util.hpp"
#include "common/registry.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "cuda_api.hpp"
#include "decode/decode_reference.hpp"

namespace retro::cuda {

namespace {

using namespace check_util;

// ---------------------------------------------------------------------------------------------------
// LibraryDecode (FlashInfer) vs partial_attention_ids
// ---------------------------------------------------------------------------------------------------

// The same reference as check_decode, per (b, kv head) over its first lens tokens; planned twice per case
// (the second plan moves every length by one token, crossing a page boundary in some requests only, so
// both the page-table upload and its reuse are exercised), then run a third time with a second state
// merged by LSE (wave's estimation zone; one of its rows empty). Its output is fp16 (FlashInfer's): 2e-3.
void check_library_decode(Checker& c) {
    struct Case { int B, Hkv, g, cap, d; float qsigma; };
    const Case cases[] = {{1, 1, 1, 16, 128, 1.0f},  {2, 2, 4, 1008, 128, 2.0f}, {1, 2, 8, 5008, 64, 1.0f},
                          {3, 1, 3, 704, 64, 3.0f},  {1, 8, 4, 9008, 128, 1.0f}, {2, 8, 4, 8192, 128, 1.0f},
                          {2, 2, 6, 160, 128, 1.0f}};
    std::mt19937 rng(7);
    for (const Case& k : cases) {
        const std::string why = library_decode_unsupported(k.d, k.g);
        if (!why.empty()) {
            c.expect(false, "library decode unavailable: " + why);
            return;
        }
        const DecodeInputs x = decode_inputs(k.B, k.Hkv, k.g, k.cap, k.d, k.qsigma, rng);
        const int nbk = x.nbk, Hq = x.Hq;
        const auto& q = x.q;
        const Half &K = x.K, &V = x.V;
        auto dq = upload(q);
        auto dk = upload(K.bits), dv = upload(V.bits);
        LibraryDecode lib(x.s, 16);
        std::vector<int32_t> lens((size_t)nbk);
        std::uniform_int_distribution<int> ld(1, std::max(1, k.cap - 1));
        for (auto& l : lens) l = ld(rng);
        lens[0] = k.cap - 1;  // the last page: one token short of full, then full
        const auto xo = random_float((size_t)k.B * Hq * k.d, rng);
        auto xl = random_float((size_t)k.B * Hq, rng, 2.0f);
        xl[1 % xl.size()] = -INFINITY;  // an empty estimation partial
        auto dxo = upload(xo), dxl = upload(xl);
        for (int round = 0; round < 3; ++round) {
            if (round == 1)
                for (auto& l : lens) l = std::min(k.cap, l + 1);
            const bool extra = round == 2;
            std::vector<float> rout, rlse;
            reference_decode(q, K, V, lens, k.B, k.Hkv, k.g, k.cap, k.d, extra ? &xo : nullptr, extra ? &xl : nullptr,
                             rout, rlse);
            const std::string tag = x.tag + (extra ? std::string(" plan 1 + extra state") : fmt(" plan %g", round));
            auto dlens = upload(lens);
            // the lengths from the host (FlashInfer's planner), then from device memory (plan_device: wave's
            // device-resident step) split as the device's SM count asks, unsplit, and in 3 tiles; the next
            // round's plan() goes back to the host's plan
            for (const int how : {-1, 0, 1, 3}) {
                const bool on_device = how >= 0;
                DeviceBuffer<float> dout((size_t)k.B * Hq * k.d), dlse((size_t)k.B * Hq);
                poison(dout), poison(dlse);
                if (on_device) lib.plan_device(dlens.get(), nullptr, how);
                else lib.plan(lens.data());
                lib.run(dq.get(), dk.get(), dv.get(), dout.get(), dlse.get(), nullptr, extra ? dxo.get() : nullptr,
                        extra ? dxl.get() : nullptr);
                synchronize();
                const auto out = download(dout), lse = download(dlse);
                const std::string t = tag + (on_device ? fmt(" device lengths, max tiles %g", how) : std::string());
                c.expect_close(t + " out", out.data(), rout.data(), out.size(), 2e-3);
                c.expect_close(t + " lse", lse.data(), rlse.data(), lse.size(), kTolLse);
            }
        }
        // the caller's page table (plan_device with d_pages: Quest's chosen 16-token pages where they lie, and
        // PQCache's chosen token rows as one-token pages): every request reads random pages of the whole pool;
        // the reference attends the same rows gathered contiguously
        for (const int P : {16, 1}) {
            LibraryDecode paged(x.s, P);
            const int stride = k.cap / P;
            std::vector<int32_t> pages((size_t)nbk * stride);
            std::uniform_int_distribution<int> pd(0, nbk * stride - 1);
            for (auto& pg : pages) pg = pd(rng);
            Half Kp = K, Vp = V;  // request r's row t = pool row pages[r * stride + t / P] * P + t % P
            for (int r = 0; r < nbk; ++r)
                for (int t = 0; t < k.cap; ++t) {
                    const size_t from = ((size_t)pages[(size_t)r * stride + t / P] * P + t % P) * k.d;
                    const size_t to = ((size_t)r * k.cap + t) * k.d;
                    std::copy_n(K.bits.begin() + from, k.d, Kp.bits.begin() + to);
                    std::copy_n(K.f.begin() + from, k.d, Kp.f.begin() + to);
                    std::copy_n(V.bits.begin() + from, k.d, Vp.bits.begin() + to);
                    std::copy_n(V.f.begin() + from, k.d, Vp.f.begin() + to);
                }
            std::vector<float> rout, rlse;
            reference_decode(q, Kp, Vp, lens, k.B, k.Hkv, k.g, k.cap, k.d, nullptr, nullptr, rout, rlse);
            auto dlens = upload(lens), dpages = upload(pages);
            for (const int how : {0, 3}) {
                DeviceBuffer<float> dout((size_t)k.B * Hq * k.d), dlse((size_t)k.B * Hq);
                poison(dout), poison(dlse);
                paged.plan_device(dlens.get(), nullptr, how, dpages.get(), stride);
                paged.run(dq.get(), dk.get(), dv.get(), dout.get(), dlse.get());
                synchronize();
                const auto out = download(dout), lse = download(dlse);
                const std::string t = x.tag + fmt(" given %g-token pages, max tiles %g", P, how);
                c.expect_close(t + " out", out.data(), rout.data(), out.size(), 2e-3);
                c.expect_close(t + " lse", lse.data(), rlse.data(), lse.size(), kTolLse);
            }
        }
    }
    // unsupported shapes are refused by name before any work
    for (const auto& [d, g] : {std::pair{256, 4}, std::pair{128, 7}, std::pair{128, 5}}) {
        DecodeShape s;
        s.group = g, s.d = d, s.capacity = 64;
        bool refused = false;
        try {
            LibraryDecode lib(s, 16);
        } catch (const ParamError& e) {
            refused = std::string(e.what()).find(std::to_string(d == 256 ? d : g)) != std::string::npos;
        }
        c.expect(refused, fmt("library decode d=%g g=%g: not refused with its shape named", d, g));
    }
}

// cuDNN's fused attention (CudnnDecode) against the same reference, on the fp16-rounded queries it is
// given (it takes one dtype for Q, K and V): per-item lengths shared by the item's KV heads, including a
// length of 1, a full capacity and one not a multiple of 128; GQA groups 1-8, head_dim 64 and 128.
void check_cudnn_decode(Checker& c) {
    struct Case { int B, Hkv, g, cap, d; float qsigma; };
    const Case cases[] = {{1, 1, 1, 16, 128, 1.0f}, {2, 2, 4, 1008, 128, 2.0f}, {1, 2, 8, 5008, 64, 1.0f},
                          {3, 1, 3, 704, 64, 3.0f}, {2, 8, 4, 8192, 128, 1.0f}};
    std::mt19937 rng(11);
    for (const Case& k : cases) {
        const std::string why = cudnn_decode_unsupported(k.d, k.g);
        if (!why.empty()) {
            c.expect(false, "cudnn decode unavailable: " + why);
            return;
        }
        DecodeInputs x = decode_inputs(k.B, k.Hkv, k.g, k.cap, k.d, k.qsigma, rng);
        const int nbk = x.nbk, Hq = x.Hq;
        auto& q = x.q;
        const Half &K = x.K, &V = x.V;
        std::vector<int32_t> item((size_t)k.B);
        std::uniform_int_distribution<int> ld(1, k.cap);
        for (auto& l : item) l = ld(rng);
        item[0] = k.cap;                            // every row
        if (k.B > 1) item[1] = std::min(k.cap, 1);  // one token
        std::vector<int32_t> lens((size_t)nbk);
        for (int bk = 0; bk < nbk; ++bk) lens[(size_t)bk] = item[(size_t)(bk / k.Hkv)];
        auto dq = upload(q);
        auto dk = upload(K.bits), dv = upload(V.bits);
        auto dl = upload(item);
        for (float& x : q) x = half_to_float(float_to_half(x));  // what cuDNN computes with
        std::vector<float> rout, rlse;
        reference_decode(q, K, V, lens, k.B, k.Hkv, k.g, k.cap, k.d, nullptr, nullptr, rout, rlse);
        CudnnDecode dnn(x.s);
        DeviceBuffer<float> dout((size_t)k.B * Hq * k.d), dlse((size_t)k.B * Hq);
        poison(dout), poison(dlse);
        dnn.run(dq.get(), dk.get(), dv.get(), dl.get(), dout.get(), dlse.get());
        synchronize();
        const auto out = download(dout), lse = download(dlse);
        c.expect_close(x.tag + " out", out.data(), rout.data(), out.size(), 2e-3);
        c.expect_close(x.tag + " lse", lse.data(), rlse.data(), lse.size(), kTolLse);
        // PyTorch's inference graph: every item exactly L tokens (no mask, no lengths), no softmax stats
        // (the caller's lse left as it was)
        CudnnDecodeOptions po;
        po.stats = false, po.exact_len = k.cap > 1 ? k.cap / 2 + 1 : 1;
        const std::vector<int32_t> lens_l((size_t)nbk, po.exact_len);
        reference_decode(q, K, V, lens_l, k.B, k.Hkv, k.g, k.cap, k.d, nullptr, nullptr, rout, rlse);
        CudnnDecode exact(x.s, po);
        poison(dout), poison(dlse);
        const auto lse_before = download(dlse);
        exact.run(dq.get(), dk.get(), dv.get(), nullptr, dout.get(), dlse.get());
        synchronize();
        const auto out_l = download(dout), lse_after = download(dlse);
        c.expect_close(x.tag + " exact_len=" + std::to_string(po.exact_len) + " out", out_l.data(), rout.data(),
                       out_l.size(), 2e-3);
        c.expect(std::memcmp(lse_before.data(), lse_after.data(), lse_after.size() * sizeof(float)) == 0,
                 x.tag + ": without stats the lse buffer was written");
    }
    // a head_dim cuDNN's fused attention does not take is refused by name before any work
    DecodeShape s;
    s.d = 100, s.capacity = 64;
    bool refused = false;
    try {
        CudnnDecode dnn(s);
    } catch (const ParamError& e) {
        refused = std::string(e.what()).find("100") != std::string::npos;
    }
    c.expect(refused, "cudnn decode d=100: not refused with its head_dim named");
    DecodeShape ok_shape;
    ok_shape.capacity = 64;
    CudnnDecodeOptions too_long;
    too_long.exact_len = 65;
    refused = false;
    try {
        CudnnDecode dnn(ok_shape, too_long);
    } catch (const ParamError& e) {
        refused = std::string(e.what()).find("65") != std::string::npos;
    }
    c.expect(refused, "cudnn decode exact_len 65 > capacity 64: not refused with the length named");
}

}  // namespace

RETRO_KERNEL_CHECKS(library, 30, {{"LibraryDecode", check_library_decode}, {"CudnnDecode", check_cudnn_decode}});

}  // namespace retro::cuda
