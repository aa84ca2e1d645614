// `retro-bench needle TRACE [--tokens A:B] [--method NAME[:JSON]]... [--top N] [--json FILE]`: are a
// needle's tokens inside what a method attends exactly, for the heads that attend to them most? The
// computation is lib/analysis/needle.hpp; this file parses the arguments and prints.
//
// Heads are ranked by mean needle mass; the top N are printed with each method's mean in_exact, the share
// of steps where every needle token was exact (`all`), and `covered` = the needle's attention mass inside
// the exact set / the needle's whole attention mass (summed over steps): whether the needle tokens that
// matter are attended exactly. --steps A:B restricts to decode steps [A, B) (e.g. the steps that write
// the answer).
#include <fmt/format.h>

#include "analysis/head_selection.hpp"
#include "analysis/needle.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"
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

// "NAME" or "NAME:{JSON params}" -> the method with its parameters resolved against the registry.
NeedleMethod parse_method(const std::string& m) {
    NeedleMethod s;
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
    return s;
}

void print_needle(const NeedleArgs& a, const TraceInfo& info, const NeedleParams& p,
                  const std::vector<NeedleHeadRow>& rows) {
    const auto& ms = p.methods;
    const int A = p.first_token, B = p.end_token;
    fmt::print("{}: needle tokens [{}, {}) ({} tokens) of prompt {}; {} (layer, q head) rows, decode steps [{}, {})\n",
               a.trace, A, B, B - A, info.prompt_len, rows.size(), p.first_step, p.end_step);
    fmt::print("{:<14} {:>8}", "layer/qhead", "needle");
    for (const auto& m : ms) fmt::print("  {:>22}", m.label.substr(0, 22));
    fmt::print("\n{:<14} {:>8}", "", "mass");
    for (size_t i = 0; i < ms.size(); ++i) fmt::print("  {:>22}", "in_exact/all/covered");
    fmt::print("\n");
    const NeedleSummary sum = summarize_needle(rows, ms.size(), a.top);
    for (int r = 0; r < sum.top; ++r) {
        const auto& x = rows[(size_t)r];
        fmt::print("{:<14} {:>8.4f}", fmt::format("L{} q{} kv{}", x.layer, x.q_head, x.kv_head), x.needle_mass);
        for (size_t i = 0; i < ms.size(); ++i)
            fmt::print("  {:>8.3f} /{:>5.2f} /{:>6.3f}", x.in_exact[i], x.all_exact[i], x.covered[i]);
        fmt::print("\n");
    }
    fmt::print("{:<14} {:>8}", fmt::format("top {} mean", sum.top), "");
    for (size_t i = 0; i < ms.size(); ++i)
        fmt::print("  {:>8.3f} /{:>5.2f} /{:>6.3f}", sum.top_in_exact[i], sum.top_all_exact[i], sum.top_covered[i]);
    fmt::print("\n{:<14} {:>8}", "all heads", "");
    for (size_t i = 0; i < ms.size(); ++i) fmt::print("  {:>13.3f}         ", sum.all_in_exact[i]);
    fmt::print("\n");
}

int run_needle(const NeedleArgs& a) {
    TraceReader reader(a.trace);
    const TraceInfo& info = reader.info();
    NeedleParams p;
    p.threads = a.threads;
    if (a.tokens.empty()) {
        std::tie(p.first_token, p.end_token) = needle_tokens_of(info, a.trace);
    } else {
        const auto c = a.tokens.find(':');
        if (c == std::string::npos) throw ConfigError("--tokens: expected A:B (token range [A, B))");
        p.first_token = std::stoi(a.tokens.substr(0, c));
        p.end_token = std::stoi(a.tokens.substr(c + 1));
    }
    for (const auto& m : (a.methods.empty() ? std::vector<std::string>{"wave", "oracle_topk"} : a.methods))
        p.methods.push_back(parse_method(m));
    p.end_step = info.num_decode_steps;
    if (!a.steps.empty()) {
        const auto c = a.steps.find(':');
        if (c == std::string::npos) throw ConfigError("--steps: expected A:B (decode steps [A, B))");
        p.first_step = std::stoi(a.steps.substr(0, c));
        p.end_step = std::stoi(a.steps.substr(c + 1));
    }
    const HeadSelection hs = select_heads(reader, a.trace, a.layers, a.kv_heads);
    const std::vector<NeedleHeadRow> rows = needle_coverage(reader, hs, p);
    print_needle(a, info, p, rows);
    if (!a.json_out.empty()) write_file_atomic(a.json_out, needle_json(a.trace, p, rows).dump(1) + "\n");
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
