#pragma once
// Host API of Quest's kernels (kernels/cuda_api.hpp, docs/cuda.md "Quest on the GPU"): quest/quest.cu;
// CPU emulation quest/quest_emulation.cpp, checks quest/quest_checks.cpp, microbenchmarks
// quest/quest_bench.cpp. The attention over the chosen pages is decode_attention_pages (decode_api.hpp).
// The CPU twin is the method `quest` (lib/methods/quest.cpp, lib/methods/quest_pages.hpp): the same
// bounds summed in the same order, the same top pages (ties to the lower page), so on the same fp16 keys
// the GPU chooses exactly the pages the CPU chooses.
#include <cstddef>
#include <cstdint>

namespace retro::cuda {

struct QuestShape {
    int seqs = 1;          ///< sequences: (replica, KV head) pairs, B * Hkv, each `capacity` rows of K
    int group = 1;         ///< query heads per KV head (1-8)
    int d = 128;           ///< head dim: 64, 128 or 256
    int page = 16;         ///< tokens per page
    int capacity = 0;      ///< token rows per sequence in K, a multiple of `page`
    bool per_head = true;  ///< a page list per query head (Quest); false: one per KV head, ranked by the group's max
    int max_pages() const { return page > 0 ? capacity / page : 0; }
    int lists() const { return seqs * (per_head ? group : 1); }
};

/// Quest's page metadata for pages [first, end) of every sequence: the channel-wise min and max of the
/// page's keys. d_k: [seqs, capacity, d] fp16; d_meta: [seqs, 2, d, max_pages] fp16, channel-major (page
/// j's min of channel e at [s, 0, e, j], its max at [s, 1, e, j]: a warp's pages are read together).
/// 0 <= first <= end <= max_pages; every page of the range holds `page` written rows (full pages: the last,
/// partial page is never scored).
void quest_page_meta(const QuestShape& s, const uint16_t* d_k, int first, int end, uint16_t* d_meta,
                     void* stream = nullptr);

/// Bytes of quest_select's scratch: lists() * max_pages 64-bit ranking keys.
size_t quest_select_scratch_bytes(const QuestShape& s);

/// Quest's selection of every list for n visible tokens (1..capacity, every sequence alike) and a budget
/// of `budget_pages` pages (>= 1, the last page included): with P = ceil(n / page) pages, every page when
/// P <= budget_pages; else the top budget_pages - 1 of the P - 1 full pages by the bound
/// sum_e max(q_e * max_e, q_e * min_e) (per query head, or the group's max of them; ties to the lower page)
/// in ascending page order, then the last page.
/// d_q: [seqs * group, d] f32 (= [B, Hkv*g, d]); d_meta: quest_page_meta's, for pages [0, P - 1);
/// d_table: [lists, budget_pages] int32, out: list i's pages as pages of K's pool (sequence * max_pages +
/// page: decode_attention_pages's page table), entries past the list's pages left as they are;
/// d_lens: [lists] int32, out: the list's tokens (its full pages * page + the last page's tokens);
/// d_scratch: quest_select_scratch_bytes(s) bytes.
void quest_select(const QuestShape& s, const float* d_q, const uint16_t* d_meta, int n, int budget_pages,
                  int32_t* d_table, int32_t* d_lens, void* d_scratch, void* stream = nullptr);

}  // namespace retro::cuda
