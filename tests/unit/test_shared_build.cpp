// Shared builds: a method point that differs from a built one only in search-time parameters
// (ParamSpec::search) can take a copy of that build (Method::clone_built) and then selects exactly as
// a fresh build of its own would. Checked for every registered method that marks search-time
// parameters, one parameter at a time and all at once, over decode steps that append to the index
// (so a shallow copy would show); plus the seed rule and the registry helpers.
#include <gtest/gtest.h>

#include <fstream>
#include <stdexcept>

#include "bench/config.hpp"
#include "bench/head_run.hpp"
#include "bench/runner.hpp"
#include "methods/params.hpp"
#include "method_harness.hpp"
#include "scratch_dir.hpp"

using namespace retro;
using namespace retro::method_test;

namespace {

/// Small indexes over a 600-token prompt with a short window (decode tokens leave it, so FAISS methods
/// add to their index on every step).
nlohmann::json base_params(const std::string& name) {
    nlohmann::json p = {{"sink", 8}, {"window", 32}, {"k", 20}};
    if (name == "faiss_ivf") p.update({{"nlist", 16}, {"nprobe", 4}});
    if (name == "retrieval_attention") p.update({{"nq", 20}, {"build_L", 50}});
    if (name == "wave") p = {{"retrieval", 6}, {"estimation", 10}, {"update_segment", 64}, {"segment", 256}};
    return p;
}

/// Another valid value of search-time parameter `s` (given its base value `v`).
nlohmann::json other_value(const ParamSpec& s, const nlohmann::json& v) {
    switch (s.type) {
        case ParamType::boolean: return !v.get<bool>();
        case ParamType::string:
            for (const auto& c : s.choices)
                if (c != v.get<std::string>()) return c;
            throw std::logic_error("no other choice for " + s.name);
        case ParamType::integer: return v.get<long long>() + 3 <= s.max ? v.get<long long>() + 3 : v.get<long long>() - 1;
        default: return v.get<double>() >= 1 ? nlohmann::json(v.get<double>() + 7) : nlohmann::json(v.get<double>() / 2);
    }
}

void expect_same(const Replay& a, const Replay& b, const std::string& what) {
    ASSERT_EQ(a.sels.size(), b.sels.size()) << what;
    for (size_t t = 0; t < a.sels.size(); ++t) {
        EXPECT_EQ(a.sels[t].exact, b.sels[t].exact) << what << ", step " << t;
        EXPECT_EQ(a.sels[t].exact_log_weight, b.sels[t].exact_log_weight) << what << ", step " << t;
        EXPECT_EQ(a.sels[t].scan_ops, b.sels[t].scan_ops) << what << ", step " << t;
        EXPECT_EQ(a.sels[t].h2d_bytes, b.sels[t].h2d_bytes) << what << ", step " << t;
        EXPECT_EQ(a.sels[t].d2h_bytes, b.sels[t].d2h_bytes) << what << ", step " << t;
        EXPECT_EQ(a.fps[t].cpu_bytes, b.fps[t].cpu_bytes) << what << ", step " << t;
        EXPECT_EQ(a.fps[t].gpu_bytes, b.fps[t].gpu_bytes) << what << ", step " << t;
    }
}

const char* kSharing[] = {"faiss_flat", "faiss_ivf", "faiss_hnsw", "retrieval_attention", "wave"};

}  // namespace

TEST(SharedBuild, MethodsThatShareMarkSearchTimeParameters) {
    for (const char* name : kSharing) {
        const MethodInfo& info = find_method(name);
        int n = 0;
        for (const auto& s : info.params) n += s.search;
        EXPECT_GE(n, 1) << name;
        const std::string budget = info.name == "wave" ? "retrieval" : "k";
        const auto* k = &*std::find_if(info.params.begin(), info.params.end(), [&](const ParamSpec& s) { return s.name == budget; });
        EXPECT_TRUE(k->search) << name << ": the budget " << budget << " is search-time";
    }
    // a build parameter stays a build parameter
    const MethodInfo& hnsw = find_method("faiss_hnsw");
    for (const auto& s : hnsw.params) {
        if (s.name == "M" || s.name == "ef_construction" || s.name == "sink" || s.name == "window") {
            EXPECT_FALSE(s.search) << s.name;
        }
    }
}

TEST(SharedBuild, CopyOfABuildSelectsAsAFreshBuildOfTheOtherPoint) {
    const HeadSlice h = blob_head({.prompt_len = 600, .steps = 5, .d = 16, .group = 2, .seed = 7, .prefill = 48});
    int methods_checked = 0;
    for (const auto& info : method_registry()) {
        bool any = false;
        for (const auto& s : info.params) any |= s.search;
        if (!any) continue;
        const nlohmann::json base = resolve_params(info, base_params(info.name));
        auto built = info.make(base);
        built->build(context_of(h), KVView{h.keys.data(), h.values.data(), h.prompt_len, h.head_dim});
        // every search-time parameter changed alone, then all of them together
        std::vector<nlohmann::json> points;
        nlohmann::json all = base;
        for (const auto& s : info.params) {
            if (!s.search) continue;
            nlohmann::json p = base;
            p[s.name] = other_value(s, base.at(s.name));
            all[s.name] = p[s.name];
            points.push_back(p);
        }
        points.push_back(all);
        for (const auto& given : points) {
            const nlohmann::json p = resolve_params(info, given);
            const std::string what = info.name + " " + p.dump();
            auto fresh = info.make(p);
            auto copy = built->clone_built(*fresh);
            ASSERT_NE(copy, nullptr) << what << ": marks search-time parameters but cannot share its build";
            const Replay shared = replay(*copy, h, info.name, {10}, 0, /*built=*/true);
            const Replay own = replay(h, info.name, p, {10});
            expect_same(shared, own, what);
        }
        // the original is untouched by its copies' appends (a deep copy)
        expect_same(replay(*built, h, info.name, {10}, 0, true), replay(h, info.name, base, {10}), info.name + " original");
        ++methods_checked;
    }
    EXPECT_GE(methods_checked, 5);
}

TEST(SharedBuild, OtherClassesAndUnsharingMethodsGiveNoCopy) {
    const HeadSlice h = blob_head({.prompt_len = 200, .steps = 1, .d = 16, .group = 2});
    auto flat = make_method("faiss_flat", base_params("faiss_flat"));
    flat->build(context_of(h), KVView{h.keys.data(), h.values.data(), h.prompt_len, h.head_dim});
    EXPECT_EQ(flat->clone_built(*make_method("retrieval_attention", base_params("retrieval_attention"))), nullptr);
    auto quest = make_method("quest", {{"k", 32}});
    quest->build(context_of(h), KVView{h.keys.data(), h.values.data(), h.prompt_len, h.head_dim});
    EXPECT_EQ(quest->clone_built(*make_method("quest", {{"k", 64}})), nullptr);
}

TEST(SharedBuild, SeedIgnoresSearchTimeParametersOnly) {
    const MethodInfo& info = find_method("faiss_hnsw");
    const nlohmann::json a = resolve_params(info, {{"k", 20}});
    const unsigned s = method_seed("faiss_hnsw", a, 3, 1);
    EXPECT_EQ(s, method_seed("faiss_hnsw", resolve_params(info, {{"k", 300}, {"ef_search", 64}}), 3, 1));
    EXPECT_NE(s, method_seed("faiss_hnsw", resolve_params(info, {{"k", 20}, {"M", 16}}), 3, 1));
    EXPECT_NE(s, method_seed("faiss_hnsw", a, 3, 0));
    EXPECT_EQ(build_params(info, a).count("k"), 0u);
    EXPECT_EQ(build_params(info, a).count("M"), 1u);
}

TEST(SharedBuild, MarkingAnUndeclaredParameterIsAnError) {
    MethodInfo m = find_method("faiss_flat");
    EXPECT_THROW(mark_search_params(m, {"no_such"}), std::logic_error);
}

// The runner (retro-bench run) builds a method once per head for the points of a sweep that differ only
// in search-time parameters and replays the others on copies: a sweep's records equal its points run
// one at a time (every metric but the measured times), the manifest counts the copies, and the points
// sharing a build report that build's time.
TEST(SharedBuild, TheRunnerSharesBuildsAcrossABudgetSweep) {
    test::ScratchDir dir;
    const nlohmann::json trace = {{"path", dir.path + "/synth.h5"},
                                  {"synth", {{"preset", "smollm2"}, {"num_layers", 1}, {"prompt_len", 600},
                                             {"decode_steps", 4}}}};
    const nlohmann::json hnsw = {{"name", "faiss_hnsw"}, {"params", {{"sink", 4}, {"window", 32}, {"k", {10, 40}}}}};
    const nlohmann::json wave = {{"name", "wave"},
                                 {"params", {{"retrieval", {4, 9}}, {"segment", 256}, {"update_segment", 64}}}};
    const auto run = [&](const std::string& name, const nlohmann::json& methods) {
        const nlohmann::json j = {{"name", name}, {"traces", nlohmann::json::array({trace})}, {"kv_heads", {0, 1}},
                                  {"metrics", {{"recall_k", {10}}}}, {"methods", methods}};
        RunnerOptions opt;
        opt.results_root = dir.path + "/results";
        return run_config(parse_config(j, name + ".json"), opt);
    };
    const RunOutcome sweep = run("sweep", nlohmann::json::array({hnsw, wave}));
    ASSERT_EQ(sweep.records.size(), 4u);
    std::ifstream mf(sweep.dir + "/manifest.json");
    const nlohmann::json manifest = nlohmann::json::parse(mf);
    EXPECT_EQ(manifest.at("sessions").back().at("builds_shared"), 4) << "2 heads x (hnsw k=40, wave retrieval=9)";
    const auto metric = [](const nlohmann::json& r, const char* m) { return r.at("metrics").at(m).at("mean"); };
    EXPECT_EQ(metric(sweep.records[0], "build_ms"), metric(sweep.records[1], "build_ms")) << "one HNSW build per head";
    size_t i = 0;
    for (const nlohmann::json& m : {hnsw, wave})
        for (const nlohmann::json& v : m["params"].at(m["name"] == "wave" ? "retrieval" : "k")) {
            nlohmann::json one = m;
            one["params"][m["name"] == "wave" ? "retrieval" : "k"] = v;
            const RunOutcome alone = run("alone" + std::to_string(i), nlohmann::json::array({one}));
            ASSERT_EQ(alone.records.size(), 1u);
            const nlohmann::json& a = alone.records[0];
            const nlohmann::json& s = sweep.records[i++];
            EXPECT_EQ(a.at("params"), s.at("params"));
            for (const char* k : {"recall@10", "mass", "out_err", "exact_frac", "scan_ops", "h2d_bytes"})
                EXPECT_EQ(metric(a, k), metric(s, k)) << s.at("params").dump() << " " << k;
        }
}
