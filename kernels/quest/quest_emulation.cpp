// Part of the CPU emulation of cuda_api.hpp (docs/cuda.md, "CPU emulation"): "device" memory is host memory,
// launches queued on their streams (common/emulation_streams.hpp); written independently of the kernels and
// of lib/methods/quest_pages.
// This file: Quest's selection (quest_api.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "common/emulation_streams.hpp"
#include "common/emulation_trace.hpp"
#include "common/registry.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

// the launchers' argument checks (quest.cu), so that a run path the emulation passes does not throw on a GPU
void check_args(const QuestShape& s) {
    if (s.seqs < 1 || s.group < 1 || s.group > 8 || !(s.d == 64 || s.d == 128 || s.d == 256) || s.page < 1 ||
        s.capacity < 0 || s.capacity % s.page != 0)
        throw ParamError("cuda quest: bad shape (group 1-8, d 64/128/256, page >= 1, capacity a multiple of page)");
}

}  // namespace

void quest_page_meta(const QuestShape& s, const uint16_t* K, int first, int end, uint16_t* meta, void* st) {
    check_args(s);
    if (first < 0 || end < first || end > s.max_pages()) throw ParamError("cuda quest_page_meta: pages out of range");
    emu::kernel("quest_page_meta", K, first, end, meta);
    emu::enqueue(st, [=] {
        const size_t d = (size_t)s.d, mp = (size_t)s.max_pages();
        for (int seq = 0; seq < s.seqs; ++seq)
            for (int j = first; j < end; ++j)
                for (size_t e = 0; e < d; ++e) {
                    float lo = INFINITY, hi = -INFINITY;
                    for (int i = 0; i < s.page; ++i) {
                        const float x = half_to_float(K[((size_t)seq * s.capacity + (size_t)j * s.page + i) * d + e]);
                        lo = std::min(lo, x), hi = std::max(hi, x);
                    }
                    meta[(((size_t)seq * 2 + 0) * d + e) * mp + j] = float_to_half(lo);
                    meta[(((size_t)seq * 2 + 1) * d + e) * mp + j] = float_to_half(hi);
                }
    });
}

size_t quest_select_scratch_bytes(const QuestShape&) { return 8; }

void quest_select(const QuestShape& s, const float* q, const uint16_t* meta, int n, int budget, int32_t* table,
                  int32_t* lens, void* scratch, void* st) {
    check_args(s);
    if (n < 1 || n > s.capacity || budget < 1) throw ParamError("cuda quest_select: n or budget out of range");
    emu::kernel("quest_select", q, meta, n, budget, table, lens, scratch);
    emu::enqueue(st, [=] {
        const int d = s.d, mp = s.max_pages(), per = s.per_head ? s.group : 1;
        const int pages = (n + s.page - 1) / s.page, last = pages - 1;
        for (int list = 0; list < s.lists(); ++list) {
            const int seq = list / per;
            int32_t* out = table + (size_t)list * budget;
            if (pages <= budget) {
                for (int j = 0; j < pages; ++j) out[j] = seq * mp + j;
                lens[list] = n;
                continue;
            }
            std::vector<float> score((size_t)last);
            for (int j = 0; j < last; ++j) {
                const int h0 = s.per_head ? list % per : 0, h1 = s.per_head ? h0 + 1 : s.group;
                for (int h = h0; h < h1; ++h) {
                    float sc = 0;
                    for (int e = 0; e < d; ++e) {
                        const float qe = q[((size_t)seq * s.group + h) * d + e];
                        const float lo = half_to_float(meta[(((size_t)seq * 2 + 0) * d + e) * mp + j]);
                        const float hi = half_to_float(meta[(((size_t)seq * 2 + 1) * d + e) * mp + j]);
                        sc += std::max(qe * hi, qe * lo);
                    }
                    score[(size_t)j] = h == h0 ? sc : std::max(score[(size_t)j], sc);
                }
            }
            std::vector<int> order((size_t)last);
            std::iota(order.begin(), order.end(), 0);
            std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[(size_t)a] > score[(size_t)b]; });
            order.resize((size_t)(budget - 1));
            std::sort(order.begin(), order.end());
            for (size_t i = 0; i < order.size(); ++i) out[i] = seq * mp + order[i];
            out[budget - 1] = seq * mp + last;
            lens[list] = (budget - 1) * s.page + (n - last * s.page);
        }
    });
}

RETRO_KERNEL_EMULATION(quest);

}  // namespace retro::cuda
