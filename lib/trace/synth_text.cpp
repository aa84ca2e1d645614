// The synthetic text shared by every layer and head: a topic per token (runs that recur), a word type per
// token (repeated words), and the needle positions.
#include <algorithm>
#include <cstdlib>

#include "trace/synth.hpp"
#include "trace/synth_random.hpp"

namespace retro {

using namespace synth_detail;

SynthText synth_text(const SynthParams& p) {
    SynthText t;
    const int n = p.n_tokens();
    t.topic.resize((size_t)n);
    Rng r(p.seed, kText);
    int cur = 0;
    t.num_topics = 1;
    const double p_switch = 1.0 / p.topic_run;
    for (int i = 0; i < n; ++i) {
        if (i > 0 && r.uniform() < p_switch) {
            if (t.num_topics == 1 || r.uniform() < p.topic_new_prob) {
                cur = t.num_topics++;
            } else {
                int c = r.below(t.num_topics - 1);  // a previously seen topic other than the current one
                if (c >= cur) ++c;
                cur = c;
            }
        }
        t.topic[(size_t)i] = cur;
    }
    // Word types: uniform over the vocabulary (repeated words recur all over the context).
    t.word.resize((size_t)n);
    Rng rw(p.seed, kWord);
    for (int i = 0; i < n; ++i) t.word[(size_t)i] = rw.below(p.vocab_size);
    // Needles: non-overlapping spans [x, x + needle_span) in [sink_tokens, prompt_len - local_window).
    Rng rn(p.seed, kNeedlePos);
    const int span = p.needle_span;
    const int lo = p.sink_tokens, hi = p.prompt_len - p.local_window - (span - 1);
    std::vector<int> pos;
    while ((int)pos.size() < p.num_needles && hi > lo) {
        const int x = lo + rn.below(hi - lo);
        if (std::none_of(pos.begin(), pos.end(), [&](int y) { return std::abs(x - y) < span; })) pos.push_back(x);
    }
    std::sort(pos.begin(), pos.end());
    t.needles = pos;
    return t;
}

}  // namespace retro
