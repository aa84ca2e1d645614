#pragma once
// Needle coverage: are a needle's tokens inside what a method attends exactly, for the heads that
// attend to them most? `retro-bench needle` prints it (docs/traces.md, "needle").
//
// The needle is the prompt token range [first_token, end_token) (by default the trace's `needle_tokens`
// attribute, written by python/retro_bench/dump/dump_trace.py for needle-in-a-haystack prompts). For every (layer,
// query head) and decode step: needle mass = full attention's weight on the range (softmax of
// q.k/sqrt(d) over the visible tokens). Each method is built and replayed as `retro-bench run` does (build
// on the prompt, append every decode token, select at every step); per head and step, in_exact = the
// share of the needle's tokens in the method's exact list for that head.
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "analysis/head_selection.hpp"
#include "trace/reader.hpp"

namespace retro {

/// One method replayed: its registry name and fully resolved parameters (resolve_params), with the label
/// the table shows.
struct NeedleMethod {
    std::string label;
    std::string name;
    nlohmann::json params;
};

struct NeedleParams {
    int first_token = -1, end_token = -1;  ///< the needle [A, B) of the prompt; 0 <= A < B <= prompt_len
    int first_step = 0;                    ///< decode steps [first_step, end_step) are scored
    int end_step = -1;                     ///< -1 = the trace's num_decode_steps
    std::vector<NeedleMethod> methods;
    int threads = 0;  ///< OpenMP threads over (layer, KV head) slices (0 = all)
};

/// One (layer, query head): means over the scored steps, one entry per method in NeedleParams order.
struct NeedleHeadRow {
    int layer = 0, kv_head = 0, q_head = 0;
    double needle_mass = 0;      ///< full attention's weight on the needle, mean over steps
    double needle_mass_sum = 0;  ///< the same, summed over steps
    std::vector<double> in_exact;   ///< [methods] share of the needle's tokens in the exact list
    std::vector<double> all_exact;  ///< [methods] share of steps where every needle token was exact
    std::vector<double> covered;    ///< [methods] needle mass inside the exact set / needle mass (summed)
};

/// The trace's `needle_tokens` attribute as [A, B); ConfigError naming `path` when the trace has none.
std::pair<int, int> needle_tokens_of(const TraceInfo& info, const std::string& path);

/// The needle coverage of every (layer, query head) of `heads`, sorted by needle mass, largest first.
/// Throws ConfigError when the token or step range does not fit the trace (before any work).
std::vector<NeedleHeadRow> needle_coverage(const TraceReader& reader, const HeadSelection& heads,
                                           const NeedleParams& p);

/// Means over rows: the first `top` rows (in_exact, all_exact, covered) and all rows (in_exact).
struct NeedleSummary {
    int top = 0;  ///< rows averaged: min(top asked, rows)
    std::vector<double> top_in_exact, top_all_exact, top_covered;  ///< [methods]
    std::vector<double> all_in_exact;                              ///< [methods]
};
NeedleSummary summarize_needle(const std::vector<NeedleHeadRow>& rows, size_t methods, int top);

/// The JSON document `retro-bench needle --json` writes: trace, needle tokens, methods, every head.
nlohmann::json needle_json(const std::string& trace, const NeedleParams& p, const std::vector<NeedleHeadRow>& rows);

}  // namespace retro
