// `retro-bench needle TRACE [--tokens A:B] [--method NAME[:JSON]]... [--top N] [--json FILE]`: are a
// needle's tokens inside what a method attends exactly, for the heads that attend to them most?
//
// The needle is the token range [A, B) (default: the trace's `needle_tokens` attribute, written by
// scripts/dump/dump_trace.py for needle-in-a-haystack prompts). For every (layer, query head) and decode
// step: needle_mass = full attention's weight on [A, B) (softmax of q.k/sqrt(d) over the visible tokens).
// Each method is built and replayed like `retro-bench run` does (build on the prompt, append every decode
// token, select at every step); for each head and step, `in_exact` = the share of the needle's tokens in
// the method's exact list for that head. Heads are ranked by mean needle_mass; the top N are printed with
// each method's mean in_exact, the share of steps where every needle token was exact (`all`), and
// `covered` = the needle's attention mass inside the exact set / the needle's whole attention mass
// (summed over steps): whether the needle tokens that matter are attended exactly.
// --steps A:B restricts to decode steps [A, B) (e.g. the steps that write the answer).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "commands.hpp"
#include "core/error.hpp"
#include "attention/attention.hpp"
#include "core/fs.hpp"
#include "head_args.hpp"
#include "methods/method.hpp"
#include "methods/params.hpp"
#include "trace/reader.hpp"

namespace retro::cli {
namespace {

using json = nlohmann::json;

struct NeedleArgs {
    std::string trace, tokens, layers, kv_heads, json_out, steps;
    std::vector<std::string> methods;
    int top = 10;
    int threads = 0;
};

struct MethodSpec {
    std::string label, name;
    json params;
};

struct HeadRow {
    int layer = 0, kv_head = 0, q_head = 0;
    double needle_mass = 0;
    std::vector<double> in_exact, all_exact;  // per method, means over steps
    std::vector<double> covered;              // per method: needle mass in the exact set / needle mass
    double needle_mass_sum = 0;
};

int run_needle(const NeedleArgs& a) {
    TraceReader reader(a.trace);
    const TraceInfo& info = reader.info();
    int A = -1, B = -1;
    std::string spec = a.tokens;
    if (spec.empty()) {
        auto it = info.extra.find("needle_tokens");
        if (it == info.extra.end())
            throw ConfigError(fmt::format("{}: no needle_tokens attribute; give --tokens A:B", a.trace));
        const json j = json::parse(it->second);
        A = j.at(0).get<int>();
        B = j.at(1).get<int>();
    } else {
        const auto c = spec.find(':');
        if (c == std::string::npos) throw ConfigError("--tokens: expected A:B (token range [A, B))");
        A = std::stoi(spec.substr(0, c));
        B = std::stoi(spec.substr(c + 1));
    }
    if (A < 0 || B <= A || B > info.prompt_len)
        throw ConfigError(fmt::format("--tokens {}:{}: need 0 <= A < B <= prompt_len ({})", A, B, info.prompt_len));

    std::vector<MethodSpec> ms;
    for (const auto& m : (a.methods.empty() ? std::vector<std::string>{"wave", "oracle_topk"} : a.methods)) {
        MethodSpec s;
        const auto c = m.find(':');
        s.name = m.substr(0, c);
        json given = json::object();
        if (c != std::string::npos) {
            try {
                given = json::parse(m.substr(c + 1));
            } catch (const std::exception& e) {
                throw ConfigError(fmt::format("--method {}: parameters are not valid JSON ({})", m, e.what()));
            }
        }
        const MethodInfo& mi = find_method(s.name);
        s.params = resolve_params(mi, given);
        if (mi.check) mi.check(s.params);
        s.label = c == std::string::npos ? s.name : m;
        ms.push_back(std::move(s));
    }

    int s0 = 0, s1 = info.num_decode_steps;
    if (!a.steps.empty()) {
        const auto c = a.steps.find(':');
        if (c == std::string::npos) throw ConfigError("--steps: expected A:B (decode steps [A, B))");
        s0 = std::stoi(a.steps.substr(0, c));
        s1 = std::stoi(a.steps.substr(c + 1));
        if (s0 < 0 || s1 <= s0 || s1 > info.num_decode_steps)
            throw ConfigError(fmt::format("--steps {}:{}: need 0 <= A < B <= num_decode_steps ({})", s0, s1, info.num_decode_steps));
    }
    const HeadSelection hs = select_heads(reader, a.trace, a.layers, a.kv_heads);
    // per head: build every method, replay decode steps [0, s1), score steps [s0, s1) (prefill queries read
    // too: query-aware methods need them)
    const auto per_head = map_heads(reader, hs, a.threads, [&](const HeadSlice& s) {
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
            for (const auto& m : ms) {
                auto p = find_method(m.name).make(m.params);
                MethodContext c = ctx;
                c.seed = (unsigned)(layer * 1000 + kvh);
                p->build(c, prompt);
                inst.push_back(std::move(p));
            }
            std::vector<HeadRow> local((size_t)g);
            for (int h = 0; h < g; ++h) {
                local[(size_t)h].layer = layer;
                local[(size_t)h].kv_head = kvh;
                local[(size_t)h].q_head = s.first_q_head + h;
                local[(size_t)h].in_exact.assign(ms.size(), 0.0);
                local[(size_t)h].all_exact.assign(ms.size(), 0.0);
                local[(size_t)h].covered.assign(ms.size(), 0.0);
            }
            std::vector<float> qbuf((size_t)g * d);
            std::vector<float> sc;
            Selection sel;
            std::vector<double> nw((size_t)g * (B - A));  // needle weights of this step, per head
            for (int t = 0; t < s1; ++t) {
                const int n = s.visible(t);
                const KVView kv{s.keys.data(), s.values.data(), n, d};
                for (auto& p : inst) p->append(kv, s.prompt_len + t);
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
        },
        ReadOptions{});
    std::vector<HeadRow> rows;
    for (auto& v : per_head)
        for (auto& r : v) rows.push_back(std::move(r));
    std::sort(rows.begin(), rows.end(), [](const HeadRow& x, const HeadRow& y) { return x.needle_mass > y.needle_mass; });

    fmt::print("{}: needle tokens [{}, {}) ({} tokens) of prompt {}; {} (layer, q head) rows, decode steps [{}, {})\n",
               a.trace, A, B, B - A, info.prompt_len, rows.size(), s0, s1);
    fmt::print("{:<14} {:>8}", "layer/qhead", "needle");
    for (const auto& m : ms) fmt::print("  {:>22}", m.label.substr(0, 22));
    fmt::print("\n{:<14} {:>8}", "", "mass");
    for (size_t i = 0; i < ms.size(); ++i) fmt::print("  {:>22}", "in_exact/all/covered");
    fmt::print("\n");
    const int top = std::min<int>(a.top, (int)rows.size());
    std::vector<double> mean_in(ms.size(), 0.0), mean_all(ms.size(), 0.0), all_in(ms.size(), 0.0), mean_cov(ms.size(), 0.0);
    for (int r = 0; r < (int)rows.size(); ++r) {
        const auto& x = rows[(size_t)r];
        for (size_t i = 0; i < ms.size(); ++i) {
            all_in[i] += x.in_exact[i] / rows.size();
            if (r < top) {
                mean_in[i] += x.in_exact[i] / top;
                mean_all[i] += x.all_exact[i] / top;
                mean_cov[i] += x.covered[i] / top;
            }
        }
        if (r >= top) continue;
        fmt::print("{:<14} {:>8.4f}", fmt::format("L{} q{} kv{}", x.layer, x.q_head, x.kv_head), x.needle_mass);
        for (size_t i = 0; i < ms.size(); ++i) fmt::print("  {:>8.3f} /{:>5.2f} /{:>6.3f}", x.in_exact[i], x.all_exact[i], x.covered[i]);
        fmt::print("\n");
    }
    fmt::print("{:<14} {:>8}", fmt::format("top {} mean", top), "");
    for (size_t i = 0; i < ms.size(); ++i) fmt::print("  {:>8.3f} /{:>5.2f} /{:>6.3f}", mean_in[i], mean_all[i], mean_cov[i]);
    fmt::print("\n{:<14} {:>8}", "all heads", "");
    for (size_t i = 0; i < ms.size(); ++i) fmt::print("  {:>13.3f}         ", all_in[i]);
    fmt::print("\n");

    if (!a.json_out.empty()) {
        json j;
        j["trace"] = a.trace;
        j["needle_tokens"] = {A, B};
        j["methods"] = json::array();
        for (const auto& m : ms) j["methods"].push_back({{"label", m.label}, {"name", m.name}, {"params", m.params}});
        j["heads"] = json::array();
        for (const auto& x : rows)
            j["heads"].push_back({{"layer", x.layer}, {"kv_head", x.kv_head}, {"q_head", x.q_head},
                                  {"needle_mass", x.needle_mass}, {"in_exact", x.in_exact}, {"all_exact", x.all_exact}, {"covered", x.covered}});
        write_file_atomic(a.json_out, j.dump(1) + "\n");
    }
    return 0;
}

const CommandRegistrar reg(95, [](CLI::App& app) -> std::function<int()> {
    auto a = std::make_shared<NeedleArgs>();
    auto* c = app.add_subcommand("needle", "Are a needle's tokens in a method's exact set for the heads that attend to them most?");
    c->add_option("trace", a->trace, "trace (HDF5)")->required();
    c->add_option("--tokens", a->tokens, "needle token range A:B (default: the trace's needle_tokens attribute)");
    c->add_option("--method", a->methods, "NAME or NAME:{JSON params}; repeatable (default: wave, oracle_topk)");
    c->add_option("--layers", a->layers, "comma-separated layers (default all in the file)");
    c->add_option("--kv-heads", a->kv_heads, "comma-separated KV heads (default all)");
    c->add_option("--steps", a->steps, "decode steps A:B measured (default all)");
    c->add_option("--top", a->top, "heads printed, by needle mass (default 10)");
    c->add_option("--json", a->json_out, "also write every head to this JSON file");
    c->add_option("--threads", a->threads, "threads over (layer, KV head) slices (default OpenMP's)");
    return [a] { return run_needle(*a); };
});

}  // namespace
}  // namespace retro::cli
