#include "analysis/needle.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "attention/attention.hpp"
#include "core/error.hpp"
#include "methods/params.hpp"

namespace retro {

using json = nlohmann::json;

std::pair<int, int> needle_tokens_of(const TraceInfo& info, const std::string& path) {
    auto it = info.extra.find("needle_tokens");
    if (it == info.extra.end())
        throw ConfigError(fmt::format("{}: no needle_tokens attribute; give --tokens A:B", path));
    const json j = json::parse(it->second);
    return {j.at(0).get<int>(), j.at(1).get<int>()};
}

namespace {

// One head's rows: every method built on the prompt and replayed over decode steps [0, s1), scored on
// [s0, s1) (prefill queries are read too: query-aware methods need them).
std::vector<NeedleHeadRow> needle_rows_for(const HeadSlice& s, const TraceInfo& info, const NeedleParams& p, int s1) {
    const int A = p.first_token, B = p.end_token, s0 = p.first_step;
    const int layer = s.layer, kvh = s.kv_head;
    const int d = s.head_dim, g = s.group, T = s1 - s0;
    MethodContext ctx;
    ctx.layer = layer;
    ctx.kv_head = kvh;
    ctx.head_dim = d;
    ctx.group = g;
    ctx.prompt_len = s.prompt_len;
    ctx.scale = 1.0f / std::sqrt((float)d);
    ctx.storage = info.dtype;
    ctx.slice = &s;
    const KVView prompt{s.keys.data(), s.values.data(), s.prompt_len, d};
    std::vector<std::unique_ptr<Method>> inst;
    for (const auto& m : p.methods) {
        auto method = find_method(m.name).make(m.params);
        MethodContext c = ctx;
        c.seed = (unsigned)(layer * 1000 + kvh);
        method->build(c, prompt);
        inst.push_back(std::move(method));
    }
    std::vector<NeedleHeadRow> local((size_t)g);
    for (int h = 0; h < g; ++h) {
        local[(size_t)h].layer = layer;
        local[(size_t)h].kv_head = kvh;
        local[(size_t)h].q_head = s.first_q_head + h;
        local[(size_t)h].in_exact.assign(p.methods.size(), 0.0);
        local[(size_t)h].all_exact.assign(p.methods.size(), 0.0);
        local[(size_t)h].covered.assign(p.methods.size(), 0.0);
    }
    std::vector<float> qbuf((size_t)g * d);
    std::vector<float> sc;
    Selection sel;
    std::vector<double> nw((size_t)g * (B - A));  // needle weights of this step, per head
    for (int t = 0; t < s1; ++t) {
        const int n = s.visible(t);
        const KVView kv{s.keys.data(), s.values.data(), n, d};
        for (auto& m : inst) m->append(kv, s.prompt_len + t);
        if (t < s0) continue;
        for (int h = 0; h < g; ++h) {
            const float* q = s.query(h, t);
            std::copy(q, q + d, qbuf.begin() + (size_t)h * d);
            // exact attention weights of this query head over the n visible tokens
            sc.resize((size_t)n);
            attention_scores(q, s.keys.data(), n, d, ctx.scale, sc.data());
            softmax_inplace(sc.data(), n);
            double zn = 0;
            for (int i = A; i < B; ++i) zn += nw[(size_t)h * (B - A) + (i - A)] = sc[(size_t)i];
            local[(size_t)h].needle_mass += zn / T;
            local[(size_t)h].needle_mass_sum += zn;
        }
        for (size_t mi = 0; mi < inst.size(); ++mi) {
            sel.clear();
            inst[mi]->select(qbuf.data(), t, kv, sel);
            for (int h = 0; h < g; ++h) {
                const auto ex = sel.exact_for(h);
                int hit = 0;
                for (int32_t id : ex) {
                    if (id < A || id >= B) continue;
                    ++hit;
                    local[(size_t)h].covered[mi] += nw[(size_t)h * (B - A) + (id - A)];
                }
                local[(size_t)h].in_exact[mi] += (double)hit / (B - A) / T;
                local[(size_t)h].all_exact[mi] += (hit == B - A ? 1.0 : 0.0) / T;
            }
        }
    }
    for (auto& r : local)
        for (auto& c : r.covered) c = r.needle_mass_sum > 0 ? c / r.needle_mass_sum : 0.0;
    return local;
}

}  // namespace

std::vector<NeedleHeadRow> needle_coverage(const TraceReader& reader, const HeadSelection& heads,
                                           const NeedleParams& p) {
    const TraceInfo& info = reader.info();
    const int A = p.first_token, B = p.end_token;
    if (A < 0 || B <= A || B > info.prompt_len)
        throw ConfigError(fmt::format("--tokens {}:{}: need 0 <= A < B <= prompt_len ({})", A, B, info.prompt_len));
    const int s0 = p.first_step, s1 = p.end_step < 0 ? info.num_decode_steps : p.end_step;
    if (s0 < 0 || s1 <= s0 || s1 > info.num_decode_steps)
        throw ConfigError(fmt::format("--steps {}:{}: need 0 <= A < B <= num_decode_steps ({})", s0, s1,
                                      info.num_decode_steps));
    const auto per_head = map_heads(
        reader, heads, p.threads, [&](const HeadSlice& s) { return needle_rows_for(s, info, p, s1); }, ReadOptions{});
    std::vector<NeedleHeadRow> rows;
    for (auto& v : per_head)
        for (auto& r : v) rows.push_back(std::move(r));
    std::sort(rows.begin(), rows.end(),
              [](const NeedleHeadRow& x, const NeedleHeadRow& y) { return x.needle_mass > y.needle_mass; });
    return rows;
}

NeedleSummary summarize_needle(const std::vector<NeedleHeadRow>& rows, size_t methods, int top) {
    NeedleSummary s;
    s.top = std::min<int>(top, (int)rows.size());
    s.top_in_exact.assign(methods, 0.0);
    s.top_all_exact.assign(methods, 0.0);
    s.top_covered.assign(methods, 0.0);
    s.all_in_exact.assign(methods, 0.0);
    for (int r = 0; r < (int)rows.size(); ++r) {
        const auto& x = rows[(size_t)r];
        for (size_t i = 0; i < methods; ++i) {
            s.all_in_exact[i] += x.in_exact[i] / rows.size();
            if (r < s.top) {
                s.top_in_exact[i] += x.in_exact[i] / s.top;
                s.top_all_exact[i] += x.all_exact[i] / s.top;
                s.top_covered[i] += x.covered[i] / s.top;
            }
        }
    }
    return s;
}

json needle_json(const std::string& trace, const NeedleParams& p, const std::vector<NeedleHeadRow>& rows) {
    json j;
    j["trace"] = trace;
    j["needle_tokens"] = {p.first_token, p.end_token};
    j["methods"] = json::array();
    for (const auto& m : p.methods) j["methods"].push_back({{"label", m.label}, {"name", m.name}, {"params", m.params}});
    j["heads"] = json::array();
    for (const auto& x : rows)
        j["heads"].push_back({{"layer", x.layer},
                              {"kv_head", x.kv_head},
                              {"q_head", x.q_head},
                              {"needle_mass", x.needle_mass},
                              {"in_exact", x.in_exact},
                              {"all_exact", x.all_exact},
                              {"covered", x.covered}});
    return j;
}

}  // namespace retro
