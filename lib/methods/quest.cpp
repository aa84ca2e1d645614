// `quest`: Quest's page selection (Tang et al., Quest: Query-Aware Sparsity for Efficient Long-Context LLM
// Inference, ICML 2024), following the public code's end-to-end path (mit-han-lab/Quest: quest/models/
// llama.py, quest/utils/controller.py). docs/methods/quest.md has the algorithm as built and deviations.
#include "methods/quest.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.hpp"
#include "methods/builtin_methods.hpp"

namespace retro {

namespace {

enum class QuestGqa { per_head, max };
enum class QuestPlacement { offload, gpu };

struct QuestParams {
    double k = 2048;        ///< budget: tokens (>= 1 count, (0,1) fraction of visible); pages = budget / page_size
    int page_size = 16;     ///< tokens per page
    QuestGqa gqa = QuestGqa::per_head;
    int dense_layers = 0;   ///< layers < dense_layers attend every token (Quest's code: 2)
    QuestPlacement placement = QuestPlacement::offload;
};

class Quest final : public Method {
  public:
    explicit Quest(QuestParams p) : p_(p) {}

    void build(const MethodContext& ctx, const KVView& prompt) override {
        ctx_ = ctx;
        d_ = prompt.d;
        mn_.clear();
        mx_.clear();
        meta_n_ = 0;
        absorb(prompt, prompt.n);
        n_ = prompt.n;
    }

    void append(const KVView& kv, int pos) override {
        absorb(kv, pos + 1);
        n_ = pos + 1;
    }

    void select(const float* q, int, const KVView& kv, Selection& out) override {
        const int n = kv.n, d = kv.d, g = ctx_.group, P = p_.page_size;
        absorb(kv, n);  // metadata of tokens the method was not told about (no-op under the runner)
        n_ = n;
        const int pages = (n + P - 1) / P;
        const int last = pages - 1;  // the last (possibly partial) page, holding the current token
        const int budget_pages = quest_budget_pages(p_.k, n, P);  // Quest's token_budget // page_size
        out.scan_ops = 0;
        out.d2h_bytes = 0;
        if (ctx_.layer < p_.dense_layers || pages <= budget_pages) {
            auto& ids = out.shared();
            ids.resize((size_t)n);
            std::iota(ids.begin(), ids.end(), 0);
            if (p_.placement == QuestPlacement::offload) {
                out.h2d_bytes = (double)last * P * ctx_.kv_token_bytes();
                for (int j = 0; j < last; ++j) {
                    out.fetch_units.push_back(j);
                    out.fetch_unit_tokens.push_back(P);
                }
            }
            return;
        }
        // Page scores of every page but the last, per query head: scores_ [g, last].
        const int r = budget_pages - 1;  // pages chosen by score; the last page is always attended
        scores_.resize((size_t)g * last);
        for (int h = 0; h < g; ++h)
            for (int j = 0; j < last; ++j)
                scores_[(size_t)h * last + j] = quest_page_bound(q + (size_t)h * d, mn_.data() + (size_t)j * d,
                                                                 mx_.data() + (size_t)j * d, d);
        out.scan_ops = 2.0 * last * g;  // a page bound costs two d-dim products (min and max)

        chosen_.assign((size_t)last, 0);
        if (p_.gqa == QuestGqa::per_head) {
            out.exact.resize((size_t)g);
            for (int h = 0; h < g; ++h) {
                top_pages(scores_.data() + (size_t)h * last, last, r);
                emit(out.exact[(size_t)h], n);
            }
        } else {
            agg_.assign(scores_.begin(), scores_.begin() + last);
            for (int h = 1; h < g; ++h)
                for (int j = 0; j < last; ++j) agg_[(size_t)j] = std::max(agg_[(size_t)j], scores_[(size_t)h * last + j]);
            top_pages(agg_.data(), last, r);
            emit(out.shared(), n);
        }
        // Offloaded KV: the union of the group's chosen pages (full pages) crosses PCIe; the last page
        // is produced on the GPU and stays there.
        const double fetched = (double)std::count(chosen_.begin(), chosen_.end(), (char)1);
        out.h2d_bytes = p_.placement == QuestPlacement::offload ? fetched * P * ctx_.kv_token_bytes() : 0.0;
        if (p_.placement == QuestPlacement::offload) {
            // transfer units for the system model's GPU block cache: the chosen pages, by their best
            // bound over the group (most important first)
            sel_.clear();
            for (int j = 0; j < last; ++j)
                if (chosen_[(size_t)j]) sel_.push_back(j);
            best_.assign((size_t)last, -std::numeric_limits<float>::infinity());
            for (int h = 0; h < g; ++h)
                for (int j : sel_) best_[(size_t)j] = std::max(best_[(size_t)j], scores_[(size_t)h * last + j]);
            std::stable_sort(sel_.begin(), sel_.end(), [&](int a, int b) { return best_[(size_t)a] > best_[(size_t)b]; });
            for (int j : sel_) {
                out.fetch_units.push_back(j);
                out.fetch_unit_tokens.push_back(P);
            }
        }
    }

    Footprint footprint() const override {
        const int P = p_.page_size;
        const int pages = (n_ + P - 1) / P;
        const double meta = (double)pages * 2.0 * ctx_.head_dim * (double)dtype_bytes(ctx_.storage);
        if (p_.placement == QuestPlacement::gpu) return {meta + (double)n_ * ctx_.kv_token_bytes(), 0.0};
        const int last_len = n_ - std::max(0, pages - 1) * P;
        return {meta + (double)last_len * ctx_.kv_token_bytes(), 0.0};
    }

  private:
    // Extends the per-page channel min/max over tokens [meta_n_, upto) of kv.
    void absorb(const KVView& kv, int upto) {
        const int P = p_.page_size, d = kv.d;
        for (; meta_n_ < upto; ++meta_n_) {
            const float* k = kv.key(meta_n_);
            if (meta_n_ % P == 0) {
                mn_.insert(mn_.end(), k, k + d);
                mx_.insert(mx_.end(), k, k + d);
                continue;
            }
            float* a = mn_.data() + (size_t)(meta_n_ / P) * d;
            float* b = mx_.data() + (size_t)(meta_n_ / P) * d;
            for (int e = 0; e < d; ++e) {
                a[e] = std::min(a[e], k[e]);
                b[e] = std::max(b[e], k[e]);
            }
        }
    }

    // sel_ <- the r pages with the largest scores among [0, m) (quest_top_pages); marks them in chosen_.
    void top_pages(const float* s, int m, int r) {
        quest_top_pages(s, m, r, sel_);
        for (int j : sel_) chosen_[(size_t)j] = 1;
    }

    // ids <- tokens of the pages in sel_ and of the last page, ascending.
    void emit(std::vector<int32_t>& ids, int n) const {
        const int P = p_.page_size;
        ids.clear();
        ids.reserve(sel_.size() * P + P);
        for (int j : sel_)
            for (int i = j * P; i < (j + 1) * P; ++i) ids.push_back(i);
        for (int i = ((n - 1) / P) * P; i < n; ++i) ids.push_back(i);
    }

    QuestParams p_;
    MethodContext ctx_;
    int d_ = 0;
    int meta_n_ = 0;           ///< tokens folded into the page metadata
    int n_ = 0;                ///< visible tokens at the last call
    std::vector<float> mn_, mx_;  ///< [pages, d] channel-wise min / max of each page's keys
    std::vector<float> scores_, agg_, best_;
    std::vector<int> sel_;
    std::vector<char> chosen_;  ///< [pages - 1] chosen by any query head this step
};

}  // namespace

MethodInfo quest_method_info() {
    MethodInfo m;
    m.name = "quest";
    m.description = "Quest: pages of 16 tokens scored by the min/max-key upper bound of q.k; top pages under a token "
                    "budget + the last page";
    m.paper = "Tang et al., Quest: Query-Aware Sparsity for Efficient Long-Context LLM Inference (ICML 2024)";
    m.params = {
        {"k", ParamType::number, 2048,
         "token budget: >= 1 tokens, in (0,1) a fraction of visible tokens; pages = floor(budget / page_size), "
         "the last page included",
         "Quest README headline: 2048-token budget at 32K (anchors.md §4; 512-4096 in scripts/passkey.sh); "
         "page_budget = token_budget // page_size (quest/models/llama.py)",
         1e-9, 1e9},
        {"page_size", ParamType::integer, 16, "tokens per page (the selection and transfer unit)",
         "Quest: --chunk_size 16 / page_size 16", 1, 1e6},
        {"gqa", ParamType::string, "per_head",
         "per_head: each query head its own pages (Quest is MHA); max: one shared set ranked by the max of "
         "the group's page bounds",
         "per_head: Quest (one selection per head); max ours", -1e300, 1e300, {"per_head", "max"}},
        {"dense_layers", ParamType::integer, 0,
         "layers with index < dense_layers attend every token (Quest's code keeps the first 2 dense)",
         "Quest quest/models/llama.py _quest_skip_layer = 2; default 0 here so a layer's numbers show the "
         "selection",
         0, 1e6},
        {"placement", ParamType::string, "offload",
         "offload: KV in CPU memory, chosen pages copied to the GPU each step; gpu: all KV on the GPU "
         "(Quest as published, no PCIe traffic)",
         "gpu: Quest; offload ours (the transfer model of the other offloading baselines)", -1e300, 1e300,
         {"offload", "gpu"}},
    };
    m.make = [](const nlohmann::json& j) {
        QuestParams p;
        p.k = j.at("k").get<double>();
        p.page_size = j.at("page_size").get<int>();
        p.gqa = j.at("gqa").get<std::string>() == "max" ? QuestGqa::max : QuestGqa::per_head;
        p.dense_layers = j.at("dense_layers").get<int>();
        p.placement = j.at("placement").get<std::string>() == "gpu" ? QuestPlacement::gpu : QuestPlacement::offload;
        return std::make_unique<Quest>(p);
    };
    return m;
}

}  // namespace retro
