#include "bench/damaged_parts.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>

#include "bench/results.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"

namespace retro {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string json_error_text(const std::exception& e) {
    const std::string s = e.what();
    const size_t close = s.find("] ");
    return s.rfind("[json.exception.", 0) == 0 && close != std::string::npos ? s.substr(close + 2) : s;
}

json parse_part_text(const std::string& text, std::string& damage) {
    damage.clear();
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
        damage = text.empty() ? "empty file" : "empty file (whitespace only)";
        return json(json::value_t::discarded);
    }
    try {
        return json::parse(text);
    } catch (const json::parse_error& e) {
        // The parser ran out of text inside a value (an unclosed string, array or object): the file was
        // cut short. Anything else is text that is not JSON.
        if (e.byte > text.size())
            damage = "truncated JSON (ends after " + std::to_string(text.size()) + " bytes, inside a value)";
        else
            damage = "not JSON (" + json_error_text(e) + ")";
        return json(json::value_t::discarded);
    }
}

std::string move_aside_damaged(const std::string& path) {
    std::string aside = path + ".damaged";
    for (int n = 1; file_exists(aside); ++n) aside = path + ".damaged." + std::to_string(n);
    std::error_code ec;
    fs::rename(path, aside, ec);
    if (ec) throw Error("cannot move the damaged part " + path + " aside to " + aside + ": " + ec.message());
    return aside;
}

std::string damaged_part_note(const std::string& path, const std::string& damage, const std::string& aside) {
    return path + ": damaged (" + damage + "); moved to " + aside + ", its unit will be recomputed";
}

std::string closed_loop_part_damage(const std::string& text, const std::string& run_id, const std::string& case_id) {
    std::string damage;
    const json j = parse_part_text(text, damage);
    if (!damage.empty()) return damage;
    if (!j.is_object() || !j.contains("case") || !j["case"].is_string())
        return "not a part (expected a JSON object with a \"case\")";
    const bool reference = run_id == "reference";  // the model's own attention: no "run" key
    const std::string has_case = j["case"].get<std::string>();
    const std::string has_run = j.contains("run") && j["run"].is_string() ? j["run"].get<std::string>() : "";
    if (has_case != case_id || (reference ? j.contains("run") : has_run != run_id))
        return "another unit's part: it holds case " + has_case + " of " +
               (j.contains("run") ? "run " + j["run"].dump() : std::string("the reference")) + " (copied?)";
    return "";
}

namespace {

/// The value text after 'key': in a .npy header (a Python dict literal), or "" when absent.
std::string npy_header_field(const std::string& header, const std::string& key) {
    const size_t at = header.find("'" + key + "':");
    if (at == std::string::npos) return "";
    const size_t from = header.find_first_not_of(' ', at + key.size() + 3);
    if (from == std::string::npos) return "";
    const char open = header[from];
    const size_t to = open == '(' ? header.find(')', from)
                      : open == '\'' ? header.find('\'', from + 1)
                                     : std::string::npos;
    return to == std::string::npos ? "" : header.substr(from + 1, to - from - 1);
}

/// The unsigned integers written in `s`, in order.
std::vector<uint64_t> numbers_in(const std::string& s) {
    std::vector<uint64_t> out;
    for (size_t i = 0; i < s.size();) {
        if (!std::isdigit((unsigned char)s[i])) {
            ++i;
            continue;
        }
        uint64_t v = 0;
        for (; i < s.size() && std::isdigit((unsigned char)s[i]); ++i) v = v * 10 + (uint64_t)(s[i] - '0');
        out.push_back(v);
    }
    return out;
}

}  // namespace

std::string npy_damage(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) return "cannot be read";
    const auto size = (uint64_t)in.tellg();
    if (size == 0) return "empty file";
    in.seekg(0);
    std::string head(std::min<uint64_t>(size, 12), '\0');
    in.read(head.data(), (std::streamsize)head.size());
    if (head.size() < 10 || head.compare(0, 6, "\x93NUMPY") != 0) return "not a .npy file (no NUMPY magic)";
    const auto byte = [&](size_t i) { return (uint64_t)(unsigned char)head[i]; };
    const bool v1 = head[6] == 1;  // version 1: a 2-byte header length; 2 and 3: 4 bytes
    if (!v1 && head.size() < 12) return "truncated .npy (ends inside its header)";
    const uint64_t header_len = v1 ? byte(8) | byte(9) << 8 : byte(8) | byte(9) << 8 | byte(10) << 16 | byte(11) << 24;
    const uint64_t data_at = (v1 ? 10 : 12) + header_len;
    if (size < data_at) return "truncated .npy (ends inside its header)";
    std::string header(header_len, '\0');
    in.seekg(v1 ? 10 : 12);
    in.read(header.data(), (std::streamsize)header_len);
    const std::string descr = npy_header_field(header, "descr"), shape = npy_header_field(header, "shape");
    const std::vector<uint64_t> itemsize = numbers_in(descr), dims = numbers_in(shape);  // '<f4'; (63, 49152)
    if (itemsize.size() != 1 || header.find("'shape':") == std::string::npos)
        return "not a .npy file (unreadable header)";
    uint64_t items = 1;
    for (uint64_t d : dims) items *= d;
    const uint64_t expected = data_at + items * itemsize[0];
    if (size < expected)
        return "truncated .npy (" + std::to_string(size) + " of " + std::to_string(expected) + " bytes)";
    if (size > expected)
        return "not a whole .npy (" + std::to_string(size) + " bytes, its header says " + std::to_string(expected) +
               ")";
    return "";
}

namespace {

/// Part files are named by their unit; temporary files (".tmp-") and parts already moved aside are not parts.
bool is_part_name(const std::string& name, const std::string& ext) {
    return name.size() > ext.size() && name.ends_with(ext) && name.find(".tmp-") == std::string::npos;
}

bool is_closed_loop_dir(const std::string& dir) {
    try {
        const json m = json::parse(read_file(dir + "/manifest.json"));
        return m.is_object() && m.value("experiment", "") == "closed-loop";
    } catch (const std::exception&) {  // no manifest (a sharded sweep before its merge), or a corrupt one
        std::error_code ec;
        return fs::is_directory(dir + "/parts/reference", ec);  // only the closed loop has a reference run
    }
}

void scan_open_loop_run(const ResultsDir& rd, const fs::path& run_dir, PartsScan& out) {
    static const std::regex unit("L(\\d+)_H(\\d+)\\.json");
    const std::string run_id = run_dir.filename().string();
    for (const auto& e : fs::directory_iterator(run_dir)) {
        std::smatch m;
        const std::string name = e.path().filename().string();
        if (!std::regex_match(name, m, unit)) continue;
        ++out.checked;
        const PartCheck c = rd.check_part(run_id, std::stoi(m[1].str()), std::stoi(m[2].str()));
        if (!c.ok()) out.damaged.push_back({e.path().string(), c.damage});
    }
}

void scan_closed_loop_run(const fs::path& run_dir, PartsScan& out) {
    const std::string run_id = run_dir.filename().string();
    for (const auto& e : fs::directory_iterator(run_dir)) {
        const std::string name = e.path().filename().string(), path = e.path().string();
        std::string damage;
        if (is_part_name(name, ".json"))
            damage = closed_loop_part_damage(read_file(path), run_id, e.path().stem().string());
        else if (run_id == "reference" && is_part_name(name, ".npy"))  // the reference's log-probabilities
            damage = npy_damage(path);
        else
            continue;
        ++out.checked;
        if (!damage.empty()) out.damaged.push_back({path, damage});
    }
}

}  // namespace

PartsScan scan_results_parts(const std::string& dir) {
    std::error_code ec;
    const std::string parts = dir + "/parts";
    if (!fs::is_directory(parts, ec) && !file_exists(dir + "/manifest.json"))
        throw Error(dir + ": not a results directory (no manifest.json, no parts/); expected the directory a run "
                          "writes, <results root>/<config name>");
    PartsScan out;
    out.closed_loop = is_closed_loop_dir(dir);
    if (!fs::is_directory(parts, ec)) return out;
    std::vector<fs::path> runs;
    for (const auto& e : fs::directory_iterator(parts))
        if (e.is_directory()) runs.push_back(e.path());
    std::sort(runs.begin(), runs.end());
    const ResultsDir rd(dir);
    for (const auto& r : runs) {
        if (out.closed_loop) scan_closed_loop_run(r, out);
        else scan_open_loop_run(rd, r, out);
    }
    std::sort(out.damaged.begin(), out.damaged.end(),
              [](const DamagedFile& a, const DamagedFile& b) { return a.path < b.path; });
    return out;
}

}  // namespace retro
