#include "bench/merge.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "bench/assemble.hpp"
#include "bench/damaged_parts.hpp"
#include "bench/runner.hpp"
#include "bench/measured_hardware.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"
#include "core/host.hpp"

namespace retro {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string shard_session_path(const std::string& dir, const ShardSpec& s) {
    return dir + "/shards/shard-" + std::to_string(s.index) + "-of-" + std::to_string(s.count) + ".json";
}

namespace {

struct ShardFile {
    std::string name;  // file name under shards/
    json j;
};

std::vector<ShardFile> read_shard_files(const std::string& dir) {
    const std::string sd = dir + "/shards";
    const std::string none = dir + ": no shard sessions (shards/shard-I-of-N.json): not the results directory of "
                                   "a sharded run (retro-bench run CONFIG --shard I/N)";
    std::error_code ec;
    if (!fs::is_directory(sd, ec)) throw Error(none);
    std::vector<ShardFile> out;
    for (const auto& e : fs::directory_iterator(sd)) {
        const std::string name = e.path().filename().string();
        if (name.rfind("shard-", 0) != 0 || e.path().extension() != ".json" || name.find(".tmp-") != std::string::npos)
            continue;
        try {
            out.push_back({name, json::parse(read_file(e.path().string()))});
            (void)out.back().j.at("config_source");
            (void)out.back().j.at("config_hash").get<std::string>();
            (void)out.back().j.at("revision").get<std::string>();
        } catch (const json::exception& ex) {
            throw Error(e.path().string() + ": unreadable shard session: " + ex.what());
        }
    }
    if (out.empty()) throw Error(none);
    std::sort(out.begin(), out.end(), [](const ShardFile& a, const ShardFile& b) {
        const auto ka = std::make_pair(a.j.value("count", 0), a.j.value("index", 0));
        const auto kb = std::make_pair(b.j.value("count", 0), b.j.value("index", 0));
        return ka != kb ? ka < kb : a.name < b.name;
    });
    return out;
}

/// Values seen for one provenance field (revision, config hash): value -> (count, first two examples).
struct Seen {
    std::map<std::string, std::pair<size_t, std::vector<std::string>>> values;
    void add(const std::string& value, const std::string& where) {
        auto& v = values[value];
        ++v.first;
        if (v.second.size() < 2) v.second.push_back(where);
    }
    /// "" when one value, else "the part files come from 2 revisions: a (3 files, e.g. x) and b (...)".
    std::string conflict(const std::string& what_plural) const {
        if (values.size() <= 1) return "";
        std::string s = "the part files and shard sessions come from " + std::to_string(values.size()) + " " + what_plural + ": ";
        size_t i = 0;
        for (const auto& [value, v] : values) {
            s += i == 0 ? "" : (i + 1 == values.size() ? " and " : ", ");
            s += value + " (" + std::to_string(v.first) + " file" + (v.first == 1 ? "" : "s") + ", e.g. ";
            for (size_t k = 0; k < v.second.size(); ++k) s += (k ? ", " : "") + v.second[k];
            s += ")";
            ++i;
        }
        return s;
    }
};

/// Holds an exclusive flock on <dir>/.merge.lock: two shards that finish together merge one after the other.
class MergeLock {
  public:
    explicit MergeLock(const std::string& dir) {
        const std::string path = dir + "/.merge.lock";
        fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd_ < 0) throw Error("cannot open " + path);
        if (::flock(fd_, LOCK_EX) != 0) {
            ::close(fd_);
            throw Error("cannot lock " + path);
        }
    }
    ~MergeLock() { ::close(fd_); }
    MergeLock(const MergeLock&) = delete;
    MergeLock& operator=(const MergeLock&) = delete;

  private:
    int fd_ = -1;
};

}  // namespace

MergeOutcome merge_results(const std::string& dir) {
    const std::vector<ShardFile> shards = read_shard_files(dir);
    MergeLock lock(dir);
    const json& first = shards.front().j;
    const std::string config_file = first.value("config_file", "");
    const RunConfig cfg = parse_config(first.at("config_source"), config_file.empty() ? dir : config_file);
    const auto traces = prepare_traces(cfg, false);
    const bool on_gpu = cfg.backend == "cuda";
    const auto units = sweep_units(cfg, traces, on_gpu);
    const auto ids = sweep_run_ids(cfg, traces);
    const ResultsDir rd(dir);

    Seen revisions, configs;
    std::set<int> counts;
    std::string device;
    for (const auto& s : shards) {
        revisions.add(s.j.at("revision").get<std::string>(), "shards/" + s.name);
        configs.add(s.j.at("config_hash").get<std::string>(), "shards/" + s.name);
        counts.insert(s.j.value("count", 0));
        if (device.empty()) device = s.j.value("device", "");
    }
    // The owner of each unit, when every shard session agrees on N (to name the shards to rerun).
    const int count = counts.size() == 1 ? *counts.begin() : 0;
    const std::vector<int> owner = count > 0 ? assign_shards(units, count) : std::vector<int>();

    std::vector<std::string> missing, damaged;
    std::set<int> missing_shards;  // the shards to rerun: owners of missing and damaged parts
    size_t part_files = 0;
    for (size_t i = 0; i < units.size(); ++i) {
        const ShardUnit& u = units[i];
        const auto& t = traces[u.trace];
        for (int h : u.kv_head < 0 ? t.kv_heads : std::vector<int>{u.kv_head}) {
            const std::string path = rd.part_path(ids[u.trace][u.run], u.layer, h);
            const std::string rel = path.substr(dir.size() + 1);
            ++part_files;
            const std::string shard = count > 0 ? "shard " + std::to_string(owner[i]) + "/" + std::to_string(count) : "";
            if (!file_exists(path)) {
                missing.push_back(rel + (count > 0 ? " (" + shard + ")" : ""));
                if (count > 0) missing_shards.insert(owner[i]);
                continue;
            }
            const PartCheck c = rd.check_part(ids[u.trace][u.run], u.layer, h);
            if (!c.ok()) {  // a resume of its shard moves it aside and recomputes it
                damaged.push_back(rel + " (" + c.damage + (count > 0 ? "; " + shard : "") + ")");
                if (count > 0) missing_shards.insert(owner[i]);
                continue;
            }
            const HeadPart& p = c.part;
            revisions.add(p.origin.is_object() ? p.origin.value("revision", "unknown") : "unknown (no origin recorded)", rel);
            configs.add(p.origin.is_object() ? p.origin.value("config_hash", "unknown") : "unknown (no origin recorded)", rel);
        }
    }
    std::vector<std::string> problems;
    const auto listed = [&](const std::vector<std::string>& files, const std::string& what, const std::string& sep) {
        std::string s = std::to_string(files.size()) + " of " + std::to_string(part_files) + " part files " + what + ": ";
        for (size_t k = 0; k < files.size() && k < 8; ++k) s += (k ? sep : "") + files[k];
        if (files.size() > 8) s += sep + "and " + std::to_string(files.size() - 8) + " more";
        return s;
    };
    if (!missing.empty()) problems.push_back(listed(missing, "are missing", ", "));
    if (!damaged.empty()) problems.push_back(listed(damaged, "are damaged", "; "));
    if (!missing_shards.empty()) {  // after the missing and damaged lists: the shards that redo them
        std::string& s = problems.back();
        s += "; rerun shard";
        s += missing_shards.size() > 1 ? "s " : " ";
        size_t k = 0;
        for (int m : missing_shards) s += (k++ ? ", " : "") + std::to_string(m) + "/" + std::to_string(count);
        s += " (retro-bench run " + (config_file.empty() ? std::string("CONFIG") : config_file) +
             " --shard I/N --resume" + (damaged.empty() ? ")" : ": it moves damaged parts aside and recomputes them)");
    }
    if (auto c = revisions.conflict("revisions"); !c.empty()) problems.push_back(c);
    if (auto c = configs.conflict("config hashes"); !c.empty()) problems.push_back(c);
    if (!problems.empty()) {
        std::string s = "cannot merge " + dir + ": ";
        for (size_t k = 0; k < problems.size(); ++k) s += (k ? "; and " : "") + problems[k];
        throw Error(s);
    }

    HardwareProfile hw;
    if (cfg.hardware == kMeasuredHardware) {  // the profile the shards measured (the first that recorded one)
        const ShardFile* with = nullptr;
        for (const auto& s : shards)
            if (s.j.contains("hardware")) {
                with = &s;
                break;
            }
        if (!with)
            throw Error("cannot merge " + dir + ": hardware \"measured\" but no shard session recorded the profile "
                        "it measured (shards written by an older retro-bench?)");
        hw = HardwareProfile::from_json(with->j["hardware"], dir + "/shards/" + with->name + ": hardware");
    } else {
        hw = load_hardware_profile(cfg.hardware);
    }
    const auto reg = sweep_metric_registry(cfg);
    const SweepSummaryInput in{cfg, traces, ids, reg, rd, hw, config_file, device, revisions.values.begin()->first};
    MergeOutcome out;
    out.dir = dir;
    out.units = units.size();
    out.shard_files = (int)shards.size();
    out.records = write_run_summaries(in);
    json manifest = sweep_manifest(in);
    manifest["host"] = host_info();
    manifest["status"] = "complete";
    json sessions = json::array();
    for (const auto& s : shards)
        for (json session : s.j.value("sessions", json::array())) {
            session["shard"] = std::to_string(s.j.value("index", 0)) + "/" + std::to_string(s.j.value("count", 0));
            sessions.push_back(session);
        }
    manifest["sessions"] = sessions;
    manifest["finished_at"] = utc_now_iso();
    write_file_atomic(dir + "/manifest.json", manifest.dump(2) + "\n");
    return out;
}

}  // namespace retro
