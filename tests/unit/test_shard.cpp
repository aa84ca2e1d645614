// Sharded sweeps (lib/bench/shard, lib/bench/merge, docs/cluster.md): the assignment partitions the
// units for any shard count and is balanced; N shards run into one directory and merged give the
// one-machine run's files (timings aside); a missing, foreign-revision or foreign-config part is refused
// by name; a failed shard rerun alone completes the sweep.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "bench/config.hpp"
#include "bench/merge.hpp"
#include "bench/runner.hpp"
#include "bench/shard.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"
#include "core/host.hpp"
#include "error_of.hpp"
#include "scratch_dir.hpp"

using namespace retro;
using retro::test::ScratchDir;
using retro::test::error_of;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

TEST(Shard, ParsesIOfN) {
    const ShardSpec s = parse_shard("3/4");
    EXPECT_EQ(s.index, 3);
    EXPECT_EQ(s.count, 4);
    EXPECT_TRUE(s.active());
    EXPECT_EQ(s.str(), "3/4");
    EXPECT_EQ(parse_shard("0/1").count, 1);
    EXPECT_FALSE(ShardSpec{}.active());
}

TEST(Shard, RejectsMalformedSpecsByName) {
    for (const std::string bad : {"4/4", "0/0", "a/b", "1/", "/2", "-1/3", "1/2/3", "", "2", " 1/2", "1/99999999999"}) {
        const std::string e = error_of([&] { parse_shard(bad); });
        EXPECT_NE(e.find("--shard '" + bad + "'"), std::string::npos) << bad << ": " << e;
        EXPECT_NE(e.find("0 <= I < N"), std::string::npos) << e;
    }
    EXPECT_NE(error_of([] { parse_shard("4/4"); }).find("the shards are 0..3"), std::string::npos);
    EXPECT_NE(error_of([] { parse_shard("0/0"); }).find("at least 1"), std::string::npos);
}

// For many unit sets and shard counts: every unit in exactly one shard, each shard computing its own
// set independently gets the same partition, no shard idle when there are enough units, and the
// slowest shard within one largest item of the mean (the list-scheduling bound).
TEST(Shard, AssignmentPartitionsAndBalances) {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 40; ++trial) {
        const size_t heads = 1 + rng() % 40, runs = 1 + rng() % 12;
        std::vector<uint64_t> cost;
        std::vector<size_t> group;
        for (size_t h = 0; h < heads; ++h)
            for (size_t r = 0; r < runs; ++r) {
                cost.push_back(1 + rng() % 1000);
                group.push_back(h);
            }
        for (int n = 1; n <= 17; ++n) {
            const auto a = assign_shards(cost, group, n);
            ASSERT_EQ(a, assign_shards(cost, group, n));  // deterministic
            std::vector<int> seen(cost.size(), 0);
            std::vector<uint64_t> load((size_t)n, 0);
            for (int s = 0; s < n; ++s)  // as shard s computes it
                for (size_t i = 0; i < cost.size(); ++i)
                    if (a[i] == s) {
                        ++seen[i];
                        load[(size_t)s] += cost[i];
                    }
            for (size_t i = 0; i < cost.size(); ++i) ASSERT_EQ(seen[i], 1) << "unit " << i << " n " << n;
            // the items placed: whole heads when there are >= 4 per shard, else units
            const bool by_head = heads >= 4 * (size_t)n;
            std::vector<uint64_t> item((by_head ? heads : cost.size()), 0);
            for (size_t i = 0; i < cost.size(); ++i) item[by_head ? group[i] : i] += cost[i];
            if (by_head) {  // a head's units stay together
                for (size_t i = 1; i < cost.size(); ++i) {
                    if (group[i] == group[i - 1]) {
                        ASSERT_EQ(a[i], a[i - 1]);
                    }
                }
            }
            uint64_t total = 0, biggest = 0;
            for (auto c : item) total += c, biggest = std::max(biggest, c);
            const uint64_t slowest = *std::max_element(load.begin(), load.end());
            EXPECT_LE((double)slowest, (double)total / n + (double)biggest) << "n " << n;
            if (item.size() >= (size_t)n) {
                for (auto l : load) EXPECT_GT(l, 0u) << "an idle shard, n " << n;
            }
        }
    }
}

TEST(Shard, LargestFirstPlacesExpensiveUnitsApart) {
    // two expensive units (a 128K wave build) never share a shard while cheap ones fill the others
    const std::vector<uint64_t> cost = {1, 100, 1, 1, 100, 1};
    const auto a = assign_shards(cost, {0, 1, 2, 3, 4, 5}, 2);
    EXPECT_NE(a[1], a[4]);
    EXPECT_EQ(a, assign_shards(cost, {0, 1, 2, 3, 4, 5}, 2));
}

// A tiny sweep: 2 layers x 3 KV heads of a SmolLM2-shaped synthetic trace (made by the runner from the
// recipe), 5 runs, 30 units.
class ShardedSweep : public ::testing::Test {
  protected:
    ScratchDir dir;
    RunConfig cfg;
    void SetUp() override {
        json j = json::parse(R"({"name": "tiny", "metrics": {"recall_k": [10, 100]},
          "methods": [{"name": "full"}, {"name": "oracle_topk", "params": {"k": [10, 100]}},
                      {"name": "streaming", "params": {"sink": 4, "window": 16}}, {"name": "wave"}]})");
        j["traces"] = {{{"path", dir.path + "/t.h5"},
                        {"synth", {{"preset", "smollm2"}, {"num_layers", 2}, {"prompt_len", 600},
                                   {"decode_steps", 4}, {"prefill_queries", 0}, {"seed", 3}}}}};
        cfg = parse_config(j, dir.path + "/tiny.json");
    }
    RunOutcome run(const std::string& root, ShardSpec shard = {}, bool resume = false) {
        RunnerOptions opt;
        opt.results_root = dir.path + "/" + root;
        opt.shard = shard;
        opt.resume = resume;
        opt.threads = 1;
        opt.config_path = "tiny.json";
        return run_config(cfg, opt);
    }
    std::string results(const std::string& root) const { return dir.path + "/" + root + "/tiny"; }
};

std::string slurp(const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The summary files with what differs between two executions of one sweep taken out: measured times
// (build_ms, select_us, attend_us), write times, sessions. Everything else must be byte-identical.
const std::set<std::string> kTimed = {"build_ms", "select_us", "attend_us"};
std::string runs_without_timings(const std::string& path) {
    std::string out;
    std::istringstream in(slurp(path));
    for (std::string line; std::getline(in, line);) {
        json r = json::parse(line);
        r.erase("finished_at");
        for (const auto& m : kTimed) {
            r["metrics"].erase(m);
            r["per_layer"].erase(m);
        }
        out += r.dump() + "\n";
    }
    return out;
}
std::string csv_without_timings(const std::string& path) {
    std::istringstream in(slurp(path));
    std::string out, line;
    std::getline(in, line);
    std::vector<bool> keep;
    std::stringstream hs(line);
    for (std::string col; std::getline(hs, col, ',');) keep.push_back(!kTimed.count(col));
    auto filter = [&](const std::string& l) {  // timing columns are plain numbers (no quoted commas)
        // split keeping quoted fields whole
        std::vector<std::string> f;
        std::string cur;
        bool q = false;
        for (char c : l) {
            if (c == '"') q = !q;
            if (c == ',' && !q) {
                f.push_back(cur);
                cur.clear();
            } else {
                cur += c;
            }
        }
        f.push_back(cur);
        std::string o;
        for (size_t i = 0; i < f.size(); ++i)
            if (i >= keep.size() || keep[i]) o += f[i] + ",";
        return o + "\n";
    };
    out += filter(line);
    while (std::getline(in, line)) out += filter(line);
    return out;
}
std::string manifest_without_sessions(const std::string& path) {
    json m = json::parse(slurp(path));
    m.erase("sessions");
    m.erase("finished_at");
    return m.dump(2);
}

void expect_same_results(const std::string& a, const std::string& b) {
    EXPECT_EQ(runs_without_timings(a + "/runs.jsonl"), runs_without_timings(b + "/runs.jsonl"));
    EXPECT_EQ(csv_without_timings(a + "/per_head.csv"), csv_without_timings(b + "/per_head.csv"));
    EXPECT_EQ(manifest_without_sessions(a + "/manifest.json"), manifest_without_sessions(b + "/manifest.json"));
    // and the run records one by one
    for (const auto& e : fs::directory_iterator(a + "/runs")) {
        json ra = json::parse(slurp(e.path().string()));
        json rb = json::parse(slurp(b + "/runs/" + e.path().filename().string()));
        for (json* r : {&ra, &rb}) {
            r->erase("finished_at");
            for (const auto& m : kTimed) (*r)["metrics"].erase(m), (*r)["per_layer"].erase(m);
        }
        EXPECT_EQ(ra, rb) << e.path();
    }
}

TEST_F(ShardedSweep, UnitsOfAllShardsPartitionTheSweep) {
    const auto traces = prepare_traces(cfg, true);
    const auto units = sweep_units(cfg, traces, false);
    ASSERT_EQ(units.size(), 2u * 3u * 5u);
    std::set<std::tuple<size_t, size_t, int, int>> all;
    for (const auto& u : units) all.insert({u.trace, u.run, u.layer, u.kv_head});
    EXPECT_EQ(all.size(), units.size());
    for (int n = 1; n <= 40; ++n) {
        const auto owner = assign_shards(units, n);
        std::map<int, int> per;
        for (int s : owner) {
            ASSERT_GE(s, 0);
            ASSERT_LT(s, n);
            ++per[s];
        }
        EXPECT_EQ((int)per.size(), std::min(n, (int)units.size())) << "n " << n;
        const auto load = shard_loads(units, n);
        uint64_t sum = 0;
        for (auto l : load) sum += l;
        uint64_t want = 0;
        for (const auto& u : units) want += u.cost;
        EXPECT_EQ(sum, want);
    }
    // the GPU backend's unit is a whole layer: one per (run, layer)
    EXPECT_EQ(sweep_units(cfg, traces, true).size(), 2u * 5u);
    // wave costs more per token than streaming
    EXPECT_GT(method_cost_weight("wave"), method_cost_weight("streaming"));
}

TEST_F(ShardedSweep, MergedShardsEqualTheOneMachineRun) {
    const auto one = run("one");
    ASSERT_EQ(one.records.size(), 5u);
    for (int n : {2, 3, 7}) {
        const std::string root = "sharded" + std::to_string(n);
        size_t units = 0;
        for (int i = 0; i < n; ++i) {
            const auto out = run(root, {i, n});
            EXPECT_EQ(out.merged, i == n - 1) << "shard " << i << "/" << n;  // the last one merges
            const json s = json::parse(slurp(shard_session_path(results(root), {i, n})));
            EXPECT_EQ(s["sessions"].back()["status"], "complete");
            EXPECT_EQ(s["revision"], git_revision());
            units += s["sessions"].back()["units"].get<size_t>();
        }
        EXPECT_EQ(units, 30u) << "every unit run by exactly one of " << n << " shards";
        // each part records the shard that wrote it
        std::map<std::string, int> by_shard;
        for (const auto& e : fs::recursive_directory_iterator(results(root) + "/parts"))
            if (e.is_regular_file()) ++by_shard[json::parse(slurp(e.path().string()))["origin"]["shard"]];
        EXPECT_EQ((int)by_shard.size(), n);
        expect_same_results(results("one"), results(root));
        // an explicit merge gives the same files again
        const auto m = merge_results(results(root));
        EXPECT_EQ(m.units, 30u);
        EXPECT_EQ(m.shard_files, n);
        expect_same_results(results("one"), results(root));
        const json man = json::parse(slurp(results(root) + "/manifest.json"));
        EXPECT_EQ(man["status"], "complete");
        EXPECT_EQ(man["sessions"].size(), (size_t)n);
    }
}

TEST_F(ShardedSweep, MissingPartIsRefusedNamingItAndItsShard) {
    for (int i = 0; i < 3; ++i) run("s", {i, 3});
    const std::string d = results("s");
    // the shard owning a part: from the parts' origin
    std::string victim;
    for (const auto& e : fs::recursive_directory_iterator(d + "/parts"))
        if (e.is_regular_file() && json::parse(slurp(e.path().string()))["origin"]["shard"] == "1/3")
            victim = e.path().string();
    ASSERT_FALSE(victim.empty());
    fs::remove(victim);
    const std::string e = error_of([&] { merge_results(d); });
    EXPECT_NE(e.find("1 of 30 part files are missing"), std::string::npos) << e;
    EXPECT_NE(e.find(victim.substr(d.size() + 1) + " (shard 1/3)"), std::string::npos) << e;
    EXPECT_NE(e.find("rerun shard 1/3"), std::string::npos) << e;
    // a shard reruns alone (--resume) and, finding the sweep complete, merges it
    EXPECT_NE(error_of([&] { run("s", {1, 3}); }).find("already holds results of shard 1/3"), std::string::npos);
    const auto again = run("s", {1, 3}, true);
    EXPECT_EQ(again.heads_run, 1);
    EXPECT_TRUE(again.merged);
    run("one");
    expect_same_results(results("one"), d);
    const json s = json::parse(slurp(shard_session_path(d, {1, 3})));
    EXPECT_EQ(s["sessions"].size(), 2u);  // both attempts recorded
}

TEST_F(ShardedSweep, PartsOfAnotherRevisionOrConfigAreRefusedNamingBoth) {
    for (int i = 0; i < 2; ++i) run("s", {i, 2});
    const std::string d = results("s");
    std::vector<std::string> parts;
    for (const auto& e : fs::recursive_directory_iterator(d + "/parts"))
        if (e.is_regular_file()) parts.push_back(e.path().string());
    std::sort(parts.begin(), parts.end());
    auto edit = [](const std::string& p, const char* key, const std::string& value) {
        json j = json::parse(slurp(p));
        j["origin"][key] = value;
        write_file_atomic(p, j.dump());
    };
    edit(parts[0], "revision", "0123abc-other");
    edit(parts[1], "revision", "0123abc-other");
    std::string e = error_of([&] { merge_results(d); });
    EXPECT_NE(e.find("2 revisions"), std::string::npos) << e;
    EXPECT_NE(e.find("0123abc-other (2 files, e.g. " + parts[0].substr(d.size() + 1)), std::string::npos) << e;
    EXPECT_NE(e.find(std::string(git_revision()) + " ("), std::string::npos) << e;
    edit(parts[0], "revision", git_revision());
    edit(parts[1], "revision", git_revision());
    edit(parts[2], "config_hash", "feedfeedfeed");
    e = error_of([&] { merge_results(d); });
    EXPECT_NE(e.find("2 config hashes"), std::string::npos) << e;
    EXPECT_NE(e.find("feedfeedfeed (1 file, e.g. " + parts[2].substr(d.size() + 1) + ")"), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(d + "/manifest.json.tmp"));
}

TEST_F(ShardedSweep, ShardRefusesForceAndMergeRefusesAnUnshardedDirectory) {
    RunnerOptions opt;
    opt.results_root = dir.path + "/r";
    opt.shard = {0, 2};
    opt.force = true;
    EXPECT_NE(error_of([&] { run_config(cfg, opt); }).find("--force cannot be combined with --shard"),
              std::string::npos);
    run("one");
    EXPECT_NE(error_of([&] { merge_results(results("one")); }).find("no shard sessions"), std::string::npos);
}

}  // namespace
