// Checks of Quest's kernels (registry.hpp): quest_page_meta against the pages' channel-wise min and max,
// quest_select against the CPU twin's selection (lib/methods/quest_pages: quest_page_bound,
// quest_top_pages), page for page: the GPU must choose exactly what the method `quest` chooses. Host code.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "common/check_util.hpp"
#include "common/registry.hpp"
#include "cuda_api.hpp"
#include "methods/quest_pages.hpp"

namespace retro::cuda {

namespace {

using namespace check_util;

/// The pages' min and max keys as the CPU method keeps them: [seqs, pages, d] each, float.
void reference_meta(const QuestShape& s, const Half& K, int pages, std::vector<float>& mn, std::vector<float>& mx) {
    const size_t d = (size_t)s.d;
    mn.assign((size_t)s.seqs * pages * d, INFINITY), mx.assign(mn.size(), -INFINITY);
    for (int seq = 0; seq < s.seqs; ++seq)
        for (int j = 0; j < pages; ++j)
            for (int i = 0; i < s.page; ++i)
                for (size_t e = 0; e < d; ++e) {
                    const float x = K.f[((size_t)seq * s.capacity + (size_t)j * s.page + i) * d + e];
                    float& a = mn[((size_t)seq * pages + j) * d + e];
                    float& b = mx[((size_t)seq * pages + j) * d + e];
                    a = std::min(a, x), b = std::max(b, x);
                }
}

struct QuestCase {
    int seqs, g, d, page, max_pages, n, budget;
    bool per_head, ties;
};

QuestShape shape_of(const QuestCase& k) {
    QuestShape s;
    s.seqs = k.seqs, s.group = k.g, s.d = k.d, s.page = k.page, s.capacity = k.page * k.max_pages, s.per_head = k.per_head;
    return s;
}

/// Random keys; with `ties`, every page of a sequence a copy of its page 0, so that all bounds tie and
/// the rule "ties to the lower page" alone decides.
Half quest_keys(const QuestShape& s, bool ties, std::mt19937& rng) {
    Half K = random_half((size_t)s.seqs * s.capacity * s.d, rng);
    const size_t page_elems = (size_t)s.page * s.d;
    if (ties)
        for (int seq = 0; seq < s.seqs; ++seq)
            for (int j = 1; j < s.max_pages(); ++j) {
                const size_t from = (size_t)seq * s.capacity * s.d, to = from + j * page_elems;
                std::copy_n(K.bits.begin() + (long)from, page_elems, K.bits.begin() + (long)to);
                std::copy_n(K.f.begin() + (long)from, page_elems, K.f.begin() + (long)to);
            }
    return K;
}

void check_meta(Checker& c) {
    const QuestCase cases[] = {{1, 1, 128, 16, 10, 0, 0, true, false}, {3, 4, 64, 16, 33, 0, 0, true, false},
                               {2, 2, 256, 7, 9, 0, 0, false, false}};
    std::mt19937 rng(5);
    for (const QuestCase& k : cases) {
        const QuestShape s = shape_of(k);
        const Half K = quest_keys(s, false, rng);
        auto dk = upload(K.bits);
        DeviceBuffer<uint16_t> dm((size_t)s.seqs * 2 * s.d * s.max_pages());
        poison(dm);
        // in two calls, as the layer run does: the prompt's pages, then the pages completed later
        const int split = s.max_pages() / 2;
        quest_page_meta(s, dk.get(), 0, split, dm.get());
        quest_page_meta(s, dk.get(), split, split, dm.get());  // empty: nothing launched
        quest_page_meta(s, dk.get(), split, s.max_pages(), dm.get());
        synchronize();
        const auto meta = download(dm);
        std::vector<float> mn, mx;
        reference_meta(s, K, s.max_pages(), mn, mx);
        size_t wrong = 0;
        const size_t d = (size_t)s.d, mp = (size_t)s.max_pages();
        for (int seq = 0; seq < s.seqs; ++seq)
            for (size_t j = 0; j < mp; ++j)
                for (size_t e = 0; e < d; ++e) {
                    wrong += half_to_float(meta[(((size_t)seq * 2 + 0) * d + e) * mp + j]) != mn[((size_t)seq * mp + j) * d + e];
                    wrong += half_to_float(meta[(((size_t)seq * 2 + 1) * d + e) * mp + j]) != mx[((size_t)seq * mp + j) * d + e];
                }
        c.expect(wrong == 0, fmt("quest_page_meta seqs=%g d=%g page=%g: %g values differ from the pages' min/max", k.seqs,
                                 k.d, k.page, (double)wrong));
    }
}

void check_select(Checker& c) {
    // (seqs, g, d, page, max_pages, n, budget pages, per_head, ties)
    const QuestCase cases[] = {
        {2, 4, 128, 16, 64, 1000, 9, true, false},  // the last page partial
        {2, 4, 128, 16, 64, 1000, 9, true, true},   // every bound equal: the lowest pages
        {1, 8, 64, 16, 40, 640, 12, true, false},   // the last page full
        {3, 2, 128, 16, 50, 777, 6, false, true},   // one list per KV head: the group's max
        {1, 4, 256, 16, 20, 300, 25, true, false},  // the pages fit the budget: every page
        {2, 1, 128, 16, 30, 470, 1, true, false},   // a budget of one page: the last page alone
        {1, 2, 64, 8, 700, 5555, 64, true, false},  // many pages (several chunks of the compaction)
        {1, 1, 128, 16, 4, 5, 2, false, false},     // one page, partial
    };
    std::mt19937 rng(11);
    for (const QuestCase& k : cases) {
        const QuestShape s = shape_of(k);
        const Half K = quest_keys(s, k.ties, rng);
        const std::vector<float> q = random_float((size_t)s.seqs * s.group * s.d, rng, 1.5f);
        const int pages = (k.n + s.page - 1) / s.page, last = pages - 1;
        auto dk = upload(K.bits);
        auto dq = upload(q);
        DeviceBuffer<uint16_t> dm((size_t)s.seqs * 2 * s.d * s.max_pages());
        DeviceBuffer<int32_t> dt((size_t)s.lists() * k.budget), dl((size_t)s.lists());
        DeviceBuffer<uint8_t> scratch(quest_select_scratch_bytes(s));
        poison(dt), poison(dl);
        quest_page_meta(s, dk.get(), 0, last, dm.get());
        quest_select(s, dq.get(), dm.get(), k.n, k.budget, dt.get(), dl.get(), scratch.get());
        synchronize();
        const auto table = download(dt), lens = download(dl);

        std::vector<float> mn, mx;
        reference_meta(s, K, std::max(last, 0), mn, mx);
        const int per = s.per_head ? s.group : 1, d = s.d;
        std::vector<float> score((size_t)std::max(last, 0));
        std::vector<int> sel;
        int mismatched = 0;
        for (int list = 0; list < s.lists(); ++list) {
            const int seq = list / per;
            std::vector<int> want;  // pages of the sequence, the CPU twin's order
            if (pages <= k.budget) {
                for (int j = 0; j < pages; ++j) want.push_back(j);
            } else {
                const int h0 = s.per_head ? list % per : 0, h1 = s.per_head ? h0 + 1 : s.group;
                for (int j = 0; j < last; ++j)
                    for (int h = h0; h < h1; ++h) {
                        const float b = quest_page_bound(q.data() + ((size_t)seq * s.group + h) * d,
                                                         mn.data() + ((size_t)seq * last + j) * d,
                                                         mx.data() + ((size_t)seq * last + j) * d, d);
                        score[(size_t)j] = h == h0 ? b : std::max(score[(size_t)j], b);
                    }
                quest_top_pages(score.data(), last, k.budget - 1, sel);
                want = sel;
                want.push_back(last);
            }
            const int want_len = pages <= k.budget ? k.n : (k.budget - 1) * s.page + (k.n - last * s.page);
            bool same = lens[(size_t)list] == want_len;
            for (size_t i = 0; i < want.size() && same; ++i)
                same = table[(size_t)list * k.budget + i] == seq * s.max_pages() + want[i];
            mismatched += same ? 0 : 1;
        }
        c.expect(mismatched == 0, fmt("quest_select seqs=%g g=%g n=%g budget=%g: %g lists differ from the CPU twin's pages",
                                      k.seqs, k.g, k.n, k.budget, mismatched) +
                                      (s.per_head ? " (per_head)" : " (max)"));
        c.note(fmt("quest_select n=%g budget=%g: %g lists compared with the CPU twin's pages", k.n, k.budget, s.lists()));
    }
}

}  // namespace

RETRO_KERNEL_CHECKS(quest, 25, {{"QuestPageMeta", check_meta}, {"QuestSelect", check_select}});

}  // namespace retro::cuda
