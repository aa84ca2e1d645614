#include "bench/results.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "bench/damaged_parts.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"
#include "core/host.hpp"

namespace retro {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {
// JSON has no inf/nan: non-finite samples are stored as null and read back as +inf (the only
// non-finite metric value, lse_err of an empty selection).
json num(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }
double unnum(const json& v) { return v.is_null() ? INFINITY : v.get<double>(); }
json vec(const std::vector<double>& v) {
    json a = json::array();
    for (double x : v) a.push_back(num(x));
    return a;
}
std::vector<double> unvec(const json& a) {
    std::vector<double> v;
    for (const auto& x : a) v.push_back(unnum(x));
    return v;
}
double mean_of(const std::vector<double>& v) {
    return v.empty() ? NAN : std::accumulate(v.begin(), v.end(), 0.0) / (double)v.size();
}
std::string fmt_num(double x) {
    if (std::isnan(x)) return "";
    if (std::isinf(x)) return "inf";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", x);
    return buf;
}
std::string csv_quote(const std::string& s) {
    std::string o = "\"";
    for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
    return o + "\"";
}
}  // namespace

json HeadPart::to_json() const {
    json j;
    j["run_id"] = run_id;
    j["layer"] = layer;
    j["kv_head"] = kv_head;
    j["q_heads"] = q_heads;
    j["steps"] = steps;
    j["build_ms"] = build_ms;
    if (!trace_fingerprint.empty()) j["trace_fingerprint"] = trace_fingerprint;
    json q = json::object();
    for (const auto& [k, v] : q_metrics) {
        json rows = json::array();
        for (const auto& r : v) rows.push_back(vec(r));
        q[k] = rows;
    }
    j["q_metrics"] = q;
    json kv = json::object();
    for (const auto& [k, v] : kv_metrics) kv[k] = vec(v);
    j["kv_metrics"] = kv;
    if (!origin.is_null()) j["origin"] = origin;
    if (!method_source.is_null()) j["method_source"] = method_source;
    return j;
}

HeadPart HeadPart::from_json(const json& j) {
    try {
        HeadPart p;
        p.run_id = j.at("run_id").get<std::string>();
        p.layer = j.at("layer").get<int>();
        p.kv_head = j.at("kv_head").get<int>();
        p.q_heads = j.at("q_heads").get<std::vector<int>>();
        p.steps = j.at("steps").get<std::vector<int>>();
        p.build_ms = j.at("build_ms").get<double>();
        p.trace_fingerprint = j.value("trace_fingerprint", "");
        for (auto it = j.at("q_metrics").begin(); it != j.at("q_metrics").end(); ++it) {
            auto& rows = p.q_metrics[it.key()];
            for (const auto& r : *it) rows.push_back(unvec(r));
        }
        for (auto it = j.at("kv_metrics").begin(); it != j.at("kv_metrics").end(); ++it)
            p.kv_metrics[it.key()] = unvec(*it);
        if (j.contains("origin")) p.origin = j.at("origin");
        if (j.contains("method_source")) p.method_source = j.at("method_source");
        return p;
    } catch (const json::exception& e) {
        throw Error(json_error_text(e));
    }
}

std::string ResultsDir::part_path(const std::string& run_id, int layer, int kv_head) const {
    return dir_ + "/parts/" + run_id + "/L" + std::to_string(layer) + "_H" + std::to_string(kv_head) +
           ".json";
}

bool ResultsDir::has_part(const std::string& run_id, int layer, int kv_head) const {
    return file_exists(part_path(run_id, layer, kv_head));
}

void ResultsDir::write_part(const HeadPart& p) const {
    json j = p.to_json();
    if (!origin_.is_null()) {
        j["origin"] = origin_;
        j["origin"]["written_at"] = utc_now_iso();
    }
    write_file_atomic(part_path(p.run_id, p.layer, p.kv_head), j.dump() + "\n");
}

PartCheck ResultsDir::check_part(const std::string& run_id, int layer, int kv_head) const {
    PartCheck c;
    const json j = parse_part_text(read_file(part_path(run_id, layer, kv_head)), c.damage);
    if (!c.ok()) return c;
    try {
        if (!j.is_object()) throw Error("expected a JSON object");
        c.part = HeadPart::from_json(j);
    } catch (const Error& e) {
        c.damage = std::string("not a part (") + e.what() + ")";
        return c;
    }
    if (c.part.run_id != run_id || c.part.layer != layer || c.part.kv_head != kv_head)
        c.damage = "another unit's part: it holds run " + c.part.run_id + ", layer " + std::to_string(c.part.layer) +
                   ", KV head " + std::to_string(c.part.kv_head) + " (copied?)";
    return c;
}

HeadPart ResultsDir::read_part(const std::string& run_id, int layer, int kv_head) const {
    PartCheck c = check_part(run_id, layer, kv_head);
    if (!c.ok())
        throw Error(part_path(run_id, layer, kv_head) + ": damaged (" + c.damage + "); `retro-bench run CONFIG "
                    "--resume` moves it aside and recomputes it");
    return std::move(c.part);
}

std::string ResultsDir::run_path(const std::string& run_id) const {
    return dir_ + "/runs/" + run_id + ".json";
}

void ResultsDir::write_run(const std::string& run_id, const json& record) const {
    write_file_atomic(run_path(run_id), record.dump(2) + "\n");
}

std::vector<json> ResultsDir::read_runs() const {
    std::vector<json> out;
    std::error_code ec;
    if (!fs::is_directory(dir_ + "/runs", ec)) return out;
    for (const auto& e : fs::directory_iterator(dir_ + "/runs")) {
        const auto name = e.path().filename().string();
        if (e.path().extension() != ".json" || name.find(".tmp-") != std::string::npos) continue;
        try {
            out.push_back(json::parse(read_file(e.path().string())));
        } catch (const json::exception& ex) {
            throw Error(e.path().string() + ": " + ex.what());
        }
    }
    std::sort(out.begin(), out.end(), [](const json& a, const json& b) {
        const int ia = a.value("index", 0), ib = b.value("index", 0);
        return ia != ib ? ia < ib : a.value("run_id", "") < b.value("run_id", "");
    });
    return out;
}

bool ResultsDir::has_results() const {
    std::error_code ec;
    return (fs::is_directory(dir_ + "/parts", ec) && !fs::is_empty(dir_ + "/parts", ec)) ||
           (fs::is_directory(dir_ + "/runs", ec) && !fs::is_empty(dir_ + "/runs", ec));
}

json aggregate_parts(const std::vector<HeadPart>& parts, const std::vector<MetricInfo>& reg) {
    json metrics = json::object(), per_layer = json::object();
    for (const auto& m : reg) {
        std::vector<double> all;
        std::map<int, std::vector<double>> by_layer;
        for (const auto& p : parts) {
            auto add = [&](double x) {
                all.push_back(x);
                by_layer[p.layer].push_back(x);
            };
            if (m.level == MetricLevel::kv_head && m.name == "build_ms") {
                add(p.build_ms);
            } else if (auto q = p.q_metrics.find(m.name); q != p.q_metrics.end()) {
                for (const auto& row : q->second)
                    for (double x : row) add(x);
            } else if (auto k = p.kv_metrics.find(m.name); k != p.kv_metrics.end()) {
                for (double x : k->second) add(x);
            }
        }
        if (all.empty()) continue;
        metrics[m.name] = aggregate(all).to_json();
        json pl = json::object();
        for (const auto& [l, v] : by_layer) pl[std::to_string(l)] = num(mean_of(v));
        per_layer[m.name] = pl;
    }
    return {{"metrics", metrics}, {"per_layer", per_layer}};
}

std::string per_head_csv_header(const std::vector<MetricInfo>& reg) {
    std::string h = "run_id,method,params,trace,layer,kv_head,q_head";
    for (const auto& m : reg) h += "," + m.name;
    return h + "\n";
}

std::string per_head_csv_rows(const json& record, const std::vector<HeadPart>& parts,
                              const std::vector<MetricInfo>& reg) {
    std::string out;
    const std::string prefix = record.at("run_id").get<std::string>() + "," +
                               record.at("method").get<std::string>() + "," +
                               csv_quote(record.at("params").dump()) + "," +
                               csv_quote(record.at("trace").get<std::string>());
    for (const auto& p : parts) {
        for (size_t g = 0; g < p.q_heads.size(); ++g) {
            out += prefix + "," + std::to_string(p.layer) + "," + std::to_string(p.kv_head) + "," +
                   std::to_string(p.q_heads[g]);
            for (const auto& m : reg) {
                double v = NAN;
                if (m.name == "build_ms") v = p.build_ms;
                else if (auto q = p.q_metrics.find(m.name); q != p.q_metrics.end()) v = mean_of(q->second[g]);
                else if (auto k = p.kv_metrics.find(m.name); k != p.kv_metrics.end()) v = mean_of(k->second);
                out += "," + fmt_num(v);
            }
            out += "\n";
        }
    }
    return out;
}

}  // namespace retro
