// The registry's resolver hook (lib/methods/params.hpp set_method_resolver), which loads Python methods
// ("py:FILE:Class", python/methods/) in retro-bench and the module, exercised here without Python: an
// unknown name goes to the resolver once; a method with MethodInfo::source gets a run id named by its
// class ("py-<Class>-...", no ':' or '/' in the parts directory), the source in its key (two sources,
// two runs) and recorded in its parts and run record.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "bench/config.hpp"
#include "bench/runner.hpp"
#include "core/error.hpp"
#include "methods/builtin_methods.hpp"
#include "methods/params.hpp"
#include "scratch_dir.hpp"

using namespace retro;
using json = nlohmann::json;

namespace {

/// streaming's MethodInfo under another name, with a source as a Python method's loader sets it.
MethodInfo external_streaming(const std::string& name, const std::string& sha) {
    MethodInfo m = streaming_method_info();
    m.name = name;
    m.source = {{"file", name.substr(3, name.rfind(':') - 3)}, {"sha256", sha}};
    return m;
}

/// Installs a resolver for "py:" names while alive (counting its calls), removes it after.
struct ScopedResolver {
    int calls = 0;
    ScopedResolver() {
        set_method_resolver([this](const std::string& name) {
            ++calls;
            if (name.rfind("py:", 0) != 0) return false;
            register_method(external_streaming(name, name.find("g.py") != std::string::npos ? "bb" : "aa"));
            return true;
        });
    }
    ~ScopedResolver() { set_method_resolver({}); }
};

}  // namespace

TEST(MethodResolver, UnknownNamesGoToTheResolverOnce) {
    ScopedResolver r;
    const MethodInfo& m = find_method("py:res/a.py:Win");
    EXPECT_EQ(r.calls, 1);
    EXPECT_EQ(m.source.at("sha256"), "aa");
    EXPECT_EQ(&find_method("py:res/a.py:Win"), &m);  // registered: no second call, the same entry
    EXPECT_EQ(r.calls, 1);
    find_method("py:res/b.py:Win");  // a later registration keeps earlier references valid (a deque)
    EXPECT_EQ(m.name, "py:res/a.py:Win");
    try {
        find_method("no_such_method");
        FAIL() << "expected ConfigError";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("unknown method 'no_such_method'"), std::string::npos);
    }
    EXPECT_EQ(r.calls, 3);  // asked, declined
}

TEST(MethodResolver, SourceEntersTheRunIdAndIsRecorded) {
    ScopedResolver r;
    test::ScratchDir dir;
    const json j = {
        {"name", "resolved"},
        {"traces", json::array({{{"path", dir.path + "/synth.h5"},
                                 {"synth", {{"preset", "smollm2"}, {"num_layers", 1}, {"prompt_len", 256},
                                            {"decode_steps", 2}}}}})},
        {"kv_heads", {0}},
        {"metrics", {{"recall_k", {10}}}},
        {"methods", json::array({{{"name", "streaming"}}, {{"name", "py:dir/f.py:Win"}}, {{"name", "py:dir/g.py:Win"}}})}};
    RunnerOptions opt;
    opt.results_root = dir.path + "/results";
    const RunOutcome out = run_config(parse_config(j, "resolved.json"), opt);
    ASSERT_EQ(out.records.size(), 3u);
    const json &builtin = out.records[0], &f = out.records[1], &g = out.records[2];
    EXPECT_FALSE(builtin.contains("method_source"));
    EXPECT_EQ(builtin.at("run_id").get<std::string>().rfind("streaming-", 0), 0u);
    for (const json* rec : {&f, &g}) {
        const std::string id = rec->at("run_id");
        EXPECT_EQ(id.rfind("py-Win-", 0), 0u) << id;
        std::ifstream part(dir.path + "/results/resolved/parts/" + id + "/L0_H0.json");
        ASSERT_TRUE(part.good()) << id;
        std::stringstream text;
        text << part.rdbuf();
        EXPECT_EQ(json::parse(text.str()).at("method_source"), rec->at("method_source"));
    }
    EXPECT_EQ(f.at("method_source").at("sha256"), "aa");
    EXPECT_EQ(g.at("method_source").at("sha256"), "bb");
    EXPECT_NE(f.at("run_id"), g.at("run_id"));  // same class name, another file: another run
    // the same selections as the built-in twin: identical metrics
    EXPECT_EQ(builtin.at("metrics").at("out_err"), f.at("metrics").at("out_err"));
}
