// Config input checks of issue 16 #7: strict JSON (duplicate keys, numbers beyond a double) naming the
// file and key, "wrong type" told apart from "missing", sweep points equal after normalization run once,
// a trace given twice under two spellings, a directory given as a trace; and the trace fingerprint
// (trace/fingerprint.hpp) that --resume checks (issue 16 #3).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "bench/config.hpp"
#include "bench/runner.hpp"
#include "core/error.hpp"
#include "core/json_file.hpp"
#include "error_of.hpp"
#include "scratch_dir.hpp"
#include "trace/fingerprint.hpp"
#include "trace/reader.hpp"
#include "trace/synth.hpp"

using namespace retro;
using json = nlohmann::json;
namespace fs = std::filesystem;
using retro::test::error_of;

namespace {
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
json base() { return json::parse(R"({"name": "t", "traces": ["x.h5"], "methods": [{"name": "full"}]})"); }
/// A one-layer smollm2-shaped synthetic trace at `path` with `seed`.
void small_trace(const std::string& path, int seed) {
    SynthParams p = SynthParams::from_json(json{{"preset", "smollm2"}, {"num_layers", 1}, {"prompt_len", 256},
                                                {"decode_steps", 2}, {"prefill_queries", 8}, {"seed", seed}});
    synthesize(p, path);
}
}  // namespace

TEST(StrictJson, DuplicateKeysAreRejectedNamingThePath) {
    EXPECT_TRUE(has(error_of([] { parse_json_strict(R"({"name": "a", "name": "b"})", "c.json"); }),
                    "c.json: key name is given twice"));
    const std::string e = error_of(
        [] { parse_json_strict(R"({"methods": [{"name": "x"}, {"params": {"k": 1, "k": 2}}]})", "c.json"); });
    EXPECT_TRUE(has(e, "c.json: key methods[1].params.k is given twice")) << e;
    // the same key in two objects is fine
    EXPECT_NO_THROW(parse_json_strict(R"({"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 1}, {"k": 2}]})", "c.json"));
}

TEST(StrictJson, NumberBeyondADoubleNamesFileAndKey) {
    const std::string e =
        error_of([] { parse_json_strict(R"({"methods": [{"params": {"k": [16, 1e400]}}]})", "c.json"); });
    EXPECT_TRUE(has(e, "c.json: methods[0].params.k[1]: number out of range")) << e;
    const std::string syntax = error_of([] { parse_json_strict(R"({"a": [1, 2,, 3]})", "c.json"); });
    EXPECT_TRUE(has(syntax, "c.json: invalid JSON at a[2]")) << syntax;
}

TEST(StrictJson, DirectoryAndMissingFileAreToldApart) {
    test::ScratchDir d;
    EXPECT_TRUE(has(error_of([&] { read_json_file(d.path); }), d.path + ": is a directory, expected a config file"));
    EXPECT_TRUE(has(error_of([&] { read_json_file(d.path + "/no.json"); }), "config file not found: "));
    std::ofstream(d.path + "/dup.json") << R"({"name": "a", "traces": ["x.h5"], "traces": ["y.h5"]})";
    EXPECT_TRUE(has(error_of([&] { load_config(d.path + "/dup.json"); }), "key traces is given twice"));
}

TEST(ConfigTypes, WrongTypeIsNotReportedAsMissing) {
    json j = base();
    j["name"] = 5;
    EXPECT_TRUE(has(error_of([&] { parse_config(j, "cfg.json"); }), "cfg.json: \"name\" = 5 has the wrong type (number)"));
    j = base();
    j["methods"] = json::object();
    const std::string e = error_of([&] { parse_config(j, "cfg.json"); });
    EXPECT_TRUE(has(e, "cfg.json: \"methods\" = {} has the wrong type (object): expected a non-empty list")) << e;
    j = base();
    j["methods"] = json::array();
    EXPECT_TRUE(has(error_of([&] { parse_config(j, "cfg.json"); }), "has the wrong type (an empty list)"));
    j = base();
    j["methods"][0]["name"] = 3;
    EXPECT_TRUE(has(error_of([&] { parse_config(j, "cfg.json"); }), "methods[0]: \"name\" = 3 has the wrong type"));
    j = base();
    j["traces"] = json::array({{{"path", 7}}});
    EXPECT_TRUE(has(error_of([&] { parse_config(j, "cfg.json"); }), "traces[0]: \"path\" = 7 has the wrong type"));
    j = base();
    j.erase("name");
    EXPECT_TRUE(has(error_of([&] { parse_config(j, "cfg.json"); }), "cfg.json: missing \"name\""));
}

TEST(ConfigSweep, PointsEqualAfterNormalizationRunOnce) {
    // oracle_topk's k is a "number" parameter (a fraction below 1), kept as given: 16 and 16.0 are one point
    json j = base();
    j["methods"] = json::parse(R"([{"name": "oracle_topk", "params": {"k": [16, 16.0, 32]}},
                                   {"name": "streaming", "params": {"sink": 4, "window": [16, 16.0]}}])");
    const RunConfig c = parse_config(j, "cfg.json");
    ASSERT_EQ(c.runs.size(), 3u);
    EXPECT_EQ(c.runs[0].params["k"], 16);
    EXPECT_EQ(c.runs[1].params["k"], 32);
    EXPECT_EQ(c.runs[2].method, "streaming");
}

TEST(ConfigTraces, AliasedPathsOfOneFileAreOneTraceListedTwice) {
    test::ScratchDir d;
    fs::create_directories(d.path + "/a");
    small_trace(d.path + "/a/t.h5", 1);
    json j = base();
    j["traces"] = {d.path + "/a/t.h5", d.path + "/a/../a/t.h5"};
    const std::string e = error_of([&] { prepare_traces(parse_config(j, "cfg.json"), false); });
    EXPECT_TRUE(has(e, "trace listed twice: " + d.path + "/a/../a/t.h5 is the same file as " + d.path + "/a/t.h5")) << e;
    j["traces"] = {d.path + "/a"};
    const std::string dir_err = error_of([&] { prepare_traces(parse_config(j, "cfg.json"), false); });
    EXPECT_TRUE(has(dir_err, d.path + "/a: is a directory, expected a trace file")) << dir_err;
}

TEST(TraceFingerprint, SameContentSameFingerprintOtherContentDiffers) {
    test::ScratchDir d;
    const std::string a = d.path + "/a.h5", b = d.path + "/b.h5";
    small_trace(a, 1);
    small_trace(b, 1);
    const std::string fa = trace_fingerprint(a, TraceReader(a).info());
    EXPECT_EQ(fa.rfind("v1-" + std::to_string(fs::file_size(a)) + "-", 0), 0u) << fa;
    EXPECT_EQ(fa, trace_fingerprint(a, TraceReader(a).info()));  // deterministic
    EXPECT_EQ(fa, trace_fingerprint(b, TraceReader(b).info()));  // content, not path
    small_trace(b, 2);                                          // same shape, another seed
    EXPECT_NE(fa, trace_fingerprint(b, TraceReader(b).info()));
}
