// docs/adding-a-method.md, followed for a method defined only here: `random_k`, a uniform sample of k
// tokens plus the sinks and the current token. Its parameter struct and MethodInfo (steps 1-2), its
// registration through the public register_method (step 4), its test through the method harness
// (step 5) and a config entry run by the runner on a tiny synthetic trace (step 6). With k = every token
// it must be full attention (recall 1, mass 1, output error 0); with a small k it must keep the sinks and
// the current token and recall about what a uniform sample recalls.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include "bench/config.hpp"
#include "bench/runner.hpp"
#include "core/error.hpp"
#include "method_harness.hpp"
#include "methods/params.hpp"
#include "scratch_dir.hpp"

using namespace retro;
using namespace retro::method_test;
using json = nlohmann::json;

namespace {

// Step 2: the parameter struct, defaults in the members.
struct RandomKParams {
    double k = 64;  ///< budget: tokens sampled (>= 1) or a fraction of the visible tokens (< 1)
    int sink = 4;   ///< initial tokens always attended
};

// Step 1: the method. One shared list for the group: [0, sink), k distinct ids drawn uniformly from
// [sink, n - 1), and the current token n - 1; drawn anew each step from the per-head seed.
class RandomK final : public Method {
  public:
    explicit RandomK(RandomKParams p) : p_(p) {}
    void build(const MethodContext& ctx, const KVView&) override { ctx_ = ctx; }
    void select(const float*, int step, const KVView& kv, Selection& out) override {
        const int n = kv.n, s = std::min(p_.sink, n - 1);
        auto& ids = out.shared();
        ids.resize((size_t)s);
        std::iota(ids.begin(), ids.end(), 0);
        std::vector<int32_t> pool((size_t)(n - 1 - s));
        std::iota(pool.begin(), pool.end(), s);
        const int k = std::min(resolve_budget(p_.k, n), (int)pool.size());
        std::mt19937 rng(ctx_.seed * 7919u + (unsigned)step);
        for (int i = 0; i < k; ++i) {  // partial Fisher-Yates: the first k of pool are the sample
            std::uniform_int_distribution<int> pick(i, (int)pool.size() - 1);
            std::swap(pool[(size_t)i], pool[(size_t)pick(rng)]);
        }
        ids.insert(ids.end(), pool.begin(), pool.begin() + k);
        ids.push_back(n - 1);
        out.scan_ops = 0;  // no scoring: the sample ignores the query
        out.fetch_tokens.assign(ids.begin(), ids.end());  // offloaded KV, through the block cache
        out.h2d_bytes = (double)ids.size() * ctx_.kv_token_bytes();
    }

  private:
    RandomKParams p_;
    MethodContext ctx_;
};

// Step 2: its MethodInfo, parameters as data with their sources.
MethodInfo random_k_method_info() {
    MethodInfo m;
    m.name = "random_k";
    m.description = "uniform sample of k tokens + the sinks and the current token (a test method)";
    m.paper = "-";
    m.params = {
        {"k", ParamType::number, 64, "token budget sampled uniformly (>= 1 tokens, < 1 fraction)", "ours", 0, 1e9},
        {"sink", ParamType::integer, 4, "initial tokens always attended", "StreamingLLM's 4 sinks", 0, 1e9},
    };
    m.make = [](const json& j) {
        return std::make_unique<RandomK>(RandomKParams{j.at("k").get<double>(), j.at("sink").get<int>()});
    };
    return m;
}

// Step 4: registration, once per process, before any config is parsed.
void register_random_k() {
    static const bool done = [] {
        register_method(random_k_method_info());
        return true;
    }();
    (void)done;
}

}  // namespace

TEST(AddingAMethod, RegistersLikeABuiltInOne) {
    register_random_k();
    const MethodInfo& info = find_method("random_k");
    EXPECT_EQ(method_registry().back().name, "random_k");
    const json p = resolve_params(info, json::object());
    EXPECT_EQ(p.at("k").get<double>(), 64);
    EXPECT_EQ(p.at("sink").get<int>(), 4);
    EXPECT_THROW(resolve_params(info, {{"kk", 3}}), ConfigError);     // unknown parameter
    EXPECT_THROW(resolve_params(info, {{"k", 10.5}}), ConfigError);   // the shared budget check applies
    EXPECT_THROW(register_method(random_k_method_info()), ConfigError);  // a name is registered once
    MethodInfo nameless = random_k_method_info();
    nameless.name = "";
    EXPECT_THROW(register_method(nameless), ConfigError);
}

// Step 5: through the shared method harness.
TEST(AddingAMethod, HarnessReplayAllTokensIsFullAttention) {
    register_random_k();
    const HeadSlice h = blob_head({.prompt_len = 300, .steps = 3, .d = 16, .group = 2});
    const Replay all = replay(h, "random_k", {{"k", 1000000}}, {10, 100});
    for (int t = 0; t < h.num_steps; ++t)
        for (const auto& q : all.metrics[(size_t)t]) {
            EXPECT_EQ(q.recall[0], 1.0);
            EXPECT_EQ(q.recall[1], 1.0);
            EXPECT_NEAR(q.mass, 1.0, 1e-6);  // float32 softmax sums
            EXPECT_LT(q.out_err, 1e-5);
            EXPECT_EQ(q.exact_frac, 1.0);
        }
    const Replay few = replay(h, "random_k", {{"k", 20}, {"sink", 3}}, {10, 100});
    for (int t = 0; t < h.num_steps; ++t) {
        const auto ids = few.sels[(size_t)t].exact_for(0);
        const int n = h.visible(t);
        ASSERT_EQ(ids.size(), 3u + 20u + 1u);
        const std::set<int32_t> u(ids.begin(), ids.end());
        EXPECT_EQ(u.size(), ids.size());
        for (int32_t i : {0, 1, 2, n - 1}) EXPECT_TRUE(u.count(i)) << i;
        EXPECT_DOUBLE_EQ(few.metrics[(size_t)t][0].exact_frac, 24.0 / n);
    }
}

// Step 6: a config entry run by the runner on a tiny synthetic trace, next to full attention.
TEST(AddingAMethod, RunsThroughTheRunner) {
    register_random_k();
    test::ScratchDir dir;
    const json j = {
        {"name", "random-k"},
        {"traces", json::array({{{"path", dir.path + "/synth.h5"},
                                 {"synth", {{"preset", "smollm2"}, {"num_layers", 1}, {"prompt_len", 512},
                                            {"decode_steps", 3}}}}})},
        {"kv_heads", {0}},
        {"metrics", {{"recall_k", {10, 100}}}},
        {"methods", json::array({{{"name", "full"}},
                                 {{"name", "random_k"}, {"params", {{"k", {16, 1000000}}}}}})}};
    RunnerOptions opt;
    opt.results_root = dir.path + "/results";
    const RunOutcome out = run_config(parse_config(j, "random-k.json"), opt);
    ASSERT_EQ(out.records.size(), 3u);
    const auto mean = [](const json& r, const char* m) { return r.at("metrics").at(m).at("mean").get<double>(); };
    const json& full = out.records[0];
    const json& small = out.records[1];
    const json& all = out.records[2];
    EXPECT_EQ(small.at("method"), "random_k");
    EXPECT_EQ(small.at("params").at("k"), 16);
    EXPECT_EQ(all.at("params").at("k"), 1000000);
    for (const char* m : {"recall@10", "recall@100", "mass", "exact_frac"}) {
        EXPECT_NEAR(mean(full, m), 1.0, 1e-6) << m;  // mass: float32 softmax sums
        EXPECT_NEAR(mean(all, m), 1.0, 1e-6) << m;
    }
    EXPECT_LT(mean(all, "out_err"), 1e-5);
    // 4 sinks + 16 sampled + the current token of ~513 visible: about 4% of the tokens, and a uniform
    // sample recalls a comparable share of the top-100 (the sinks add some)
    EXPECT_NEAR(mean(small, "exact_frac"), 21.0 / 514, 1e-3);
    EXPECT_GT(mean(small, "recall@100"), 0.0);
    EXPECT_LT(mean(small, "recall@100"), 0.5);
    EXPECT_LT(mean(small, "mass"), 1.0);
    EXPECT_GT(mean(small, "out_err"), mean(all, "out_err"));
    EXPECT_GT(mean(small, "h2d_bytes"), 0.0);  // the sampled tokens come over PCIe
    EXPECT_TRUE(std::filesystem::exists(out.dir + "/runs.jsonl"));
}
