#include "bench/summary.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.hpp"
#include "methods/params.hpp"

namespace retro {

using json = nlohmann::json;

namespace {
// Parameters worth a column entry: those that vary between this method's records in the table, and
// those set away from the method's default. The full set is in runs.jsonl.
std::string params_text(const json& p, const std::set<std::string>& varying, const std::string& method) {
    const MethodInfo* info = nullptr;
    try {
        info = &find_method(method);
    } catch (const Error&) {
    }
    std::string s;
    for (auto it = p.begin(); it != p.end(); ++it) {
        bool show = varying.count(it.key()) > 0;
        if (!show && info) {
            for (const auto& spec : info->params)
                if (spec.name == it.key() && spec.default_value != *it &&
                    !(spec.default_value.is_number() && it->is_number() &&
                      spec.default_value.get<double>() == it->get<double>()))
                    show = true;
        } else if (!info) {
            show = true;
        }
        if (show)
            s += (s.empty() ? "" : " ") + it.key() + "=" + (it->is_string() ? it->get<std::string>() : it->dump());
    }
    return s.empty() ? "defaults" : s;
}
// The system point of a run (its record's "system": cache, policy, ...), values as text; empty when the
// config has no "system" section.
std::map<std::string, std::string> system_point(const json& rec) {
    std::map<std::string, std::string> out;
    if (!rec.contains("system") || !rec["system"].is_object()) return out;
    for (auto it = rec["system"].begin(); it != rec["system"].end(); ++it)
        out[it.key()] = it->is_string() ? it->get<std::string>() : it->dump();
    return out;
}
std::string stat(const json& rec, const std::string& metric, const char* which, const char* f) {
    if (!rec.contains("metrics") || !rec["metrics"].contains(metric)) return "-";
    const json& v = rec["metrics"][metric][which];
    if (v.is_null()) return "inf";
    return fmt::format(fmt::runtime(f), v.get<double>());
}
}  // namespace

std::string summary_table(const std::vector<json>& records) {
    if (records.empty()) return "(no complete runs)\n";
    // pick the recall column: recall@100 if present, else the first recall metric
    std::string recall = "recall@100";
    if (!records[0]["metrics"].contains(recall))
        for (auto it = records[0]["metrics"].begin(); it != records[0]["metrics"].end(); ++it)
            if (it.key().rfind("recall@", 0) == 0) {
                recall = it.key();
                break;
            }
    std::set<std::string> traces;
    for (const auto& r : records) traces.insert(r.value("trace", ""));
    const bool show_trace = traces.size() > 1;

    // per method: parameter keys whose value differs between its records
    std::map<std::string, std::set<std::string>> varying;
    std::map<std::string, json> first;
    for (const auto& r : records) {
        const std::string m = r.value("method", "?");
        const json p = r.value("params", json::object());
        if (!first.count(m)) {
            first[m] = p;
            continue;
        }
        for (auto it = p.begin(); it != p.end(); ++it)
            if (!first[m].contains(it.key()) || first[m][it.key()] != *it) varying[m].insert(it.key());
    }

    // system-model keys that vary between records: shown after the parameters, with the hit ratio
    std::set<std::string> sys_varying;
    const auto sys0 = system_point(records[0]);
    for (const auto& r : records) {
        const auto sp = system_point(r);
        for (const auto& [k, v] : sp)
            if (!sys0.count(k) || sys0.at(k) != v) sys_varying.insert(k);
        for (const auto& [k, v] : sys0)
            if (!sp.count(k)) sys_varying.insert(k);  // a key shown only away from its default
    }
    bool show_hit = false;
    for (const auto& r : records) show_hit = show_hit || r["metrics"].contains("cache_hit");

    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> head = {"method", "params", recall, "mass", "out_err", "out_err p90",
                                     "exact_frac", "h2d KB/step", "select us p50"};
    if (show_hit) head.insert(head.end() - 1, "cache hit");
    bool show_gpu = false;  // "backend": "cuda": the batch and the measured vs modeled layer step
    for (const auto& r : records) show_gpu = show_gpu || r.contains("batch");
    if (show_gpu) head.insert(head.end(), {"batch", "gpu step us p50", "gpu total us p50", "model step us"});
    if (show_trace) head.insert(head.begin(), "trace");
    rows.push_back(head);
    for (const auto& r : records) {
        std::vector<std::string> row = {r.value("method", "?"), params_text(r.value("params", json::object()), varying[r.value("method", "?")], r.value("method", "?")),
                                        stat(r, recall, "mean", "{:.4f}"), stat(r, "mass", "mean", "{:.4f}"),
                                        stat(r, "out_err", "mean", "{:.4f}"), stat(r, "out_err", "p90", "{:.4f}"),
                                        stat(r, "exact_frac", "mean", "{:.4f}"),
                                        r["metrics"].contains("h2d_bytes")
                                            ? fmt::format("{:.1f}", r["metrics"]["h2d_bytes"]["mean"].get<double>() / 1024.0)
                                            : "-",
                                        stat(r, "select_us", "p50", "{:.1f}")};
        if (show_hit) row.insert(row.end() - 1, stat(r, "cache_hit", "mean", "{:.3f}"));
        if (show_gpu)
            row.insert(row.end(), {r.contains("batch") ? std::to_string(r["batch"].get<int>()) : "-",
                                   stat(r, "gpu_step_us", "p50", "{:.1f}"), stat(r, "gpu_total_us", "p50", "{:.1f}"),
                                   stat(r, "model_step_us", "mean", "{:.1f}")});
        if (!sys_varying.empty()) {
            const auto sp = system_point(r);
            for (const auto& k : sys_varying)
                if (sp.count(k)) row[1] += " " + k + "=" + sp.at(k);
        }
        if (show_trace) row.insert(row.begin(), r.value("trace", ""));
        rows.push_back(row);
    }
    std::vector<size_t> w(head.size(), 0);
    for (const auto& row : rows)
        for (size_t c = 0; c < row.size(); ++c) w[c] = std::max(w[c], row[c].size());
    std::string out;
    for (size_t i = 0; i < rows.size(); ++i) {
        for (size_t c = 0; c < rows[i].size(); ++c) {
            const bool left = c < (show_trace ? 3u : 2u);
            out += left ? fmt::format("{:<{}}", rows[i][c], w[c]) : fmt::format("{:>{}}", rows[i][c], w[c]);
            out += c + 1 < rows[i].size() ? "  " : "\n";
        }
        if (i == 0) {
            size_t total = 0;
            for (size_t c = 0; c < w.size(); ++c) total += w[c] + (c + 1 < w.size() ? 2 : 0);
            out += std::string(total, '-') + "\n";
        }
    }
    return out;
}

}  // namespace retro
