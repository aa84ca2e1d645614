// Part of the CPU emulation of cuda_api.hpp (docs/cuda.md, "CPU emulation"): "device" memory is host memory,
// launches queued on their streams (common/emulation_streams.hpp); written independently of the kernels and
// of lib/methods/pq_head.
// This file: PQCache's selection (pq_api.hpp).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <numeric>
#include <vector>

#include "common/emulation_streams.hpp"
#include "common/emulation_trace.hpp"
#include "common/registry.hpp"
#include "core/error.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

void pq_scores(const PqShape& s, const float* q, const float* cb, const uint16_t* codes, int coded, float* lut,
               float* scores, void* st) {
    emu::kernel("pq_scores", s, q, cb, codes, coded, lut, scores);
    emu::enqueue(st, [=] {
        const int K = s.ksub(), ds = s.dsub(), M = s.m;
        for (int qh = 0; qh < s.seqs * s.group; ++qh) {
            const int seq = qh / s.group;
            float* t = lut + (size_t)qh * M * K;
            for (int j = 0; j < M; ++j)
                for (int c = 0; c < K; ++c) {
                    float acc = 0;
                    for (int e = 0; e < ds; ++e)
                        acc += q[(size_t)qh * s.d + (size_t)j * ds + e] * cb[(((size_t)seq * M + j) * K + c) * ds + e];
                    t[(size_t)j * K + c] = acc;
                }
            for (int i = 0; i < coded; ++i) {
                float v = 0;
                for (int j = 0; j < M; ++j) v += t[(size_t)j * K + codes[((size_t)seq * s.capacity + i) * M + j]];
                scores[(size_t)qh * s.capacity + i] = v;
            }
        }
    });
}

size_t pq_select_scratch_bytes(const PqShape&) { return 8; }

void pq_select(const PqShape& s, const float* scores, const PqLists& l_arg, int32_t* table, int32_t* lens,
               void* scratch, void* st) {
    emu::kernel("pq_select", s, scores, table, lens, scratch);
    const PqLists l = l_arg;  // a kernel parameter: copied at the launch
    emu::enqueue(st, [=] {
        const int coded = l.coded(), per = s.per();
        std::vector<float> rank((size_t)coded);
        std::vector<int> order((size_t)coded);
        for (int list = 0; list < s.lists(); ++list) {
            const int seq = list / per;
            const int h0 = s.rank == PqRank::per_head ? list % per : 0, h1 = s.rank == PqRank::per_head ? h0 + 1 : s.group;
            for (int i = 0; i < coded; ++i) {
                float a = scores[((size_t)seq * s.group + h0) * s.capacity + i];
                for (int h = h0 + 1; h < h1; ++h) {
                    const float v = scores[((size_t)seq * s.group + h) * s.capacity + i];
                    a = s.rank == PqRank::max ? std::max(a, v) : a + v;
                }
                rank[(size_t)i] = a;
            }
            std::iota(order.begin(), order.end(), 0);
            std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return rank[(size_t)a] > rank[(size_t)b]; });
            int32_t* out = table + (size_t)list * l.width;
            int r = 0;
            for (int t = 0; t < l.sink_end; ++t) out[r++] = seq * l.kv_rows + t;
            for (int t = l.coded_end; t < l.n; ++t) out[r++] = seq * l.kv_rows + t;
            for (int i = 0; i < l.k; ++i) out[r++] = seq * l.kv_rows + l.sink_end + order[(size_t)i];
            lens[list] = r;
        }
    });
}

void pq_gather_rows(const PqRowSources& s, const int32_t* table, const int32_t* lens, int lists, int width,
                    uint16_t* xk, uint16_t* xv, void* st) {
    if (const char* e = pq_row_sources_error(s, lists, width); *e)
        throw ParamError(std::string("cuda pq_gather_rows: ") + e);
    emu::kernel("pq_gather_rows", table, lens, lists, width, xk, xv);
    emu::enqueue(st, [=] {
        const size_t d = (size_t)s.d;
        for (int l = 0; l < lists; ++l) {
            const int seq = l / s.per;
            for (int i = 0; i < std::min(lens[l], width); ++i) {
                const int t = table[(size_t)l * width + i] - seq * s.kv_rows;
                const uint16_t *k, *v;
                if (t < s.sink_end || t >= s.coded_end) {
                    const size_t row = (size_t)seq * s.static_rows + (size_t)(t < s.sink_end ? t : s.sink_end + t - s.static_from);
                    k = s.static_k + row * d, v = s.static_v + row * d;
                } else {
                    const int ub = s.unit_tokens / s.block_tokens;
                    const int b = s.blocks ? s.blocks[((size_t)seq * s.units() + t / s.unit_tokens) * ub +
                                                      (t % s.unit_tokens) / s.block_tokens]
                                           : -1;
                    const size_t row = b >= 0 ? (size_t)seq * s.pool_rows + (size_t)b * s.block_tokens + t % s.block_tokens
                                              : (size_t)seq * s.kv_rows + t;
                    k = (b >= 0 ? s.pool_k : s.store_k) + row * d, v = (b >= 0 ? s.pool_v : s.store_v) + row * d;
                }
                std::memcpy(xk + ((size_t)l * width + i) * d, k, d * 2);
                std::memcpy(xv + ((size_t)l * width + i) * d, v, d * 2);
            }
        }
    });
}

RETRO_KERNEL_EMULATION(pq);

}  // namespace retro::cuda
