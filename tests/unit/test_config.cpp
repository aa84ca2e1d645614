// Config parsing: sweep expansion, defaults, and every validation error before work starts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "bench/config.hpp"
#include "core/error.hpp"
#include "methods/params.hpp"

using namespace retro;
using json = nlohmann::json;

namespace {
json base() {
    return json::parse(R"({"name": "t", "traces": ["x.h5"], "methods": [{"name": "full"}]})");
}
std::string error_of(const json& j) {
    try {
        parse_config(j, "cfg.json");
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}
}  // namespace

TEST(Config, CartesianProductOfParameterLists) {
    json j = base();
    j["methods"] = json::parse(R"([{"name": "oracle_topk", "params": {"k": [10, 100, 0.5], "gqa": ["max", "sum"]}},
                                   {"name": "streaming", "params": {"window": [64, 512]}}])");
    RunConfig c = parse_config(j, "cfg.json");
    ASSERT_EQ(c.runs.size(), 8u);
    EXPECT_EQ(c.runs[0].method, "oracle_topk");
    EXPECT_EQ(c.runs[0].params["gqa"], "max");
    EXPECT_EQ(c.runs[0].params["k"], 10);
    EXPECT_EQ(c.runs[6].method, "streaming");
    EXPECT_EQ(c.runs[6].params["sink"], 4);  // default filled in
    EXPECT_EQ(c.runs[7].params["window"], 512);
    EXPECT_EQ(c.runs[7].label(), "streaming(sink=4,window=512)");
}

TEST(Config, DuplicatePointsRunOnce) {
    json j = base();
    j["methods"] = json::parse(R"([{"name": "streaming"}, {"name": "streaming", "params": {"sink": 4}}])");
    EXPECT_EQ(parse_config(j, "").runs.size(), 1u);
}

TEST(Config, DefaultsAndSelections) {
    json j = base();
    j["layers"] = {0, 2};
    j["steps"] = {{"first", 2}, {"count", 3}, {"stride", 2}};
    RunConfig c = parse_config(j, "");
    EXPECT_EQ(c.layers, (std::vector<int>{0, 2}));
    EXPECT_TRUE(c.kv_heads.empty());
    EXPECT_EQ(c.steps.resolve(10), (std::vector<int>{2, 4, 6}));
    EXPECT_THROW(c.steps.resolve(5), ConfigError);  // needs steps 2,4,6
    EXPECT_EQ(c.recall_k, (std::vector<int>{10, 100, 1000}));
    StepSelection all;
    EXPECT_EQ(all.resolve(3), (std::vector<int>{0, 1, 2}));
}

TEST(Config, ErrorsNameTheProblem) {
    auto with = [](const char* key, json v) {
        json j = base();
        j[key] = v;
        return j;
    };
    EXPECT_NE(error_of(with("bogus", 1)).find("unknown key 'bogus'"), std::string::npos);
    EXPECT_NE(error_of(with("name", "a/b")).find("must match"), std::string::npos);
    EXPECT_NE(error_of(with("traces", json::array())).find("traces"), std::string::npos);
    EXPECT_NE(error_of(with("layers", "some")).find("layers"), std::string::npos);
    EXPECT_NE(error_of(with("steps", json{{"count", 0}})).find("steps.count"), std::string::npos);
    EXPECT_NE(error_of(with("kv_dtype", "int8")).find("kv_dtype"), std::string::npos);
    EXPECT_NE(error_of(with("metrics", json{{"recall_k", {0}}})).find("recall_k"), std::string::npos);

    json j = base();
    j["methods"] = json::parse(R"([{"name": "nosuch"}])");
    EXPECT_NE(error_of(j).find("unknown method 'nosuch' (known: full, oracle_topk, streaming"), std::string::npos);
    j["methods"] = json::parse(R"([{"name": "streaming", "params": {"windw": 3}}])");
    EXPECT_NE(error_of(j).find("unknown parameter 'windw'"), std::string::npos);
    j["methods"] = json::parse(R"([{"name": "streaming", "params": {"window": 0}}])");
    EXPECT_NE(error_of(j).find("'window' = 0: expected a value in [1"), std::string::npos);
    j["methods"] = json::parse(R"([{"name": "streaming", "params": {"window": 2.5}}])");
    EXPECT_NE(error_of(j).find("expected an integer"), std::string::npos);
    j["methods"] = json::parse(R"([{"name": "oracle_topk", "params": {"k": 100.5}}])");
    EXPECT_NE(error_of(j).find("must be an integer"), std::string::npos);
    j["methods"] = json::parse(R"([{"name": "oracle_topk", "params": {"gqa": "min"}}])");
    EXPECT_NE(error_of(j).find("expected one of per_head|max|sum"), std::string::npos);
    j["methods"] = json::parse(R"([{"name": "oracle_topk", "params": {"k": []}}])");
    EXPECT_NE(error_of(j).find("empty list"), std::string::npos);
    j["methods"] = json::parse(R"([{"name": "full", "params": {"offloaded": "yes"}}])");
    EXPECT_NE(error_of(j).find("expected true or false"), std::string::npos);
    // the origin prefixes every message
    EXPECT_EQ(error_of(j).rfind("cfg.json", 0), 0u);
}

TEST(Config, LoadReportsMissingFileAndBadJson) {
    EXPECT_THROW(load_config("/nonexistent/config.json"), ConfigError);
    char path[] = "/tmp/retro_cfg_XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "{\"name\": ", 9), 9);
    close(fd);
    try {
        load_config(path);
        FAIL();
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("invalid JSON"), std::string::npos);
    }
    unlink(path);
}

TEST(Methods, RegistryResolvesBudgets) {
    EXPECT_EQ(resolve_budget(100, 1000), 100);
    EXPECT_EQ(resolve_budget(0.1, 1000), 100);
    EXPECT_EQ(resolve_budget(0.0001, 1000), 1);
    EXPECT_EQ(resolve_budget(5000, 1000), 1000);
    for (const auto& m : method_registry()) {
        EXPECT_FALSE(m.description.empty());
        // defaults alone must resolve
        EXPECT_NO_THROW(resolve_params(m, json::object())) << m.name;
    }
}
