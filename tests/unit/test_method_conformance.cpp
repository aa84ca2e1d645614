// One conformance suite over every registered method (issue 42 #2), parametrized over the registry rather
// than written per method: at its defaults (shrunk only where a default does not fit the tiny head, named
// below), on a small clustered head with prefill queries, every method
//   - selects valid lists at every step: ids in [0, n), unique in a list, one list or one per query head,
//     log weights parallel to the lists and finite, estimated clusters with a centroid, a value sum and a
//     size that fits beside the exact tokens (the evaluator's checks, plus the structure);
//   - reports non-negative work and traffic and a finite, non-negative footprint;
//   - selects the same for the same seed (two instances, same context), and a copy of a built instance
//     (Method::clone_built, where the method offers it) selects what a fresh build selects;
//   - attends every visible token, exactly as full attention, when its budget covers them all (methods
//     that declare a token budget "k").
// A method added to the registry is covered by adding nothing here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "method_harness.hpp"
#include "methods/params.hpp"

using namespace retro;
using namespace retro::method_test;
using json = nlohmann::json;

namespace {

/// The head every method is run on: 24 topics, prefill queries (ctkvr builds from them), 6 steps.
const HeadSlice& conformance_head() {
    static const HeadSlice h = [] {
        BlobHeadParams p;
        p.prompt_len = 768, p.steps = 6, p.d = 32, p.group = 4, p.prefill = 64;
        return blob_head(p);
    }();
    return h;
}

TraceInfo info_of(const HeadSlice& h) {
    TraceInfo t;
    t.num_layers = 1, t.num_kv_heads = 1, t.num_q_heads = h.group, t.head_dim = h.head_dim;
    t.prompt_len = h.prompt_len, t.num_decode_steps = h.num_steps, t.num_prefill_queries = h.num_prefill;
    t.layers = {0};
    return t;
}

/// Defaults that do not fit a 768-token head of d = 32, shrunk (everything else stays at its default).
json params_for(const MethodInfo& m) {
    static const std::map<std::string, json> small = {
        {"wave", {{"segment", 256}, {"update_segment", 64}}},
        {"retrieval_attention", {{"k", 64}}},
        {"faiss_ivf", {{"nlist", 16}}},
        {"ctkvr", {{"C", 48}}},  // centroids from the last C prefill queries: the head has 64
    };
    const auto it = small.find(m.name);
    json given = it == small.end() ? json::object() : it->second;
    for (auto p = given.begin(); p != given.end();)  // only what the method declares
        p = std::any_of(m.params.begin(), m.params.end(), [&](const ParamSpec& s) { return s.name == p.key(); })
                ? std::next(p)
                : (given.erase(p.key()), given.begin());
    return resolve_params(m, given);
}

bool declares_token_budget(const MethodInfo& m) {
    return std::any_of(m.params.begin(), m.params.end(),
                       [](const ParamSpec& s) { return s.name == "k" && s.type == retro::ParamType::number; });
}

/// Every registered method; with `budget`, those that declare a token budget "k".
std::vector<std::string> registered(bool budget = false) {
    std::vector<std::string> out;
    for (const MethodInfo& m : method_registry())
        if (!budget || declares_token_budget(m)) out.push_back(m.name);
    return out;
}

class Conformance : public ::testing::TestWithParam<std::string> {
  protected:
    const MethodInfo& info() const { return find_method(GetParam()); }
};

/// The exact lists of every step, with their log weights: what "the same selection" compares.
std::vector<std::vector<std::vector<int32_t>>> lists(const Replay& r) {
    std::vector<std::vector<std::vector<int32_t>>> out;
    for (const Selection& s : r.sels) out.push_back(s.exact);
    return out;
}

}  // namespace

TEST_P(Conformance, SelectsValidListsAndReportsSaneWork) {
    const HeadSlice& h = conformance_head();
    const json params = params_for(info());
    if (info().check_trace) ASSERT_NO_THROW(info().check_trace(params, info_of(h))) << params.dump();
    const Replay r = replay(h, GetParam(), params);  // the evaluator throws on a bad id or a duplicate
    ASSERT_EQ(r.sels.size(), (size_t)h.num_steps);
    for (int t = 0; t < h.num_steps; ++t) {
        SCOPED_TRACE("step " + std::to_string(t));
        const Selection& s = r.sels[(size_t)t];
        const int n = h.visible(t);
        ASSERT_TRUE(s.exact.size() == 1 || s.exact.size() == (size_t)h.group) << s.exact.size() << " lists";
        std::set<int32_t> exact_any;
        for (size_t l = 0; l < s.exact.size(); ++l) {
            const std::set<int32_t> u(s.exact[l].begin(), s.exact[l].end());
            EXPECT_EQ(u.size(), s.exact[l].size()) << "duplicate ids in list " << l;
            ASSERT_TRUE(u.empty() || (*u.begin() >= 0 && *u.rbegin() < n)) << "ids outside [0, " << n << ")";
            exact_any.insert(u.begin(), u.end());
        }
        if (!s.exact_log_weight.empty()) {
            ASSERT_EQ(s.exact_log_weight.size(), s.exact.size());
            for (size_t l = 0; l < s.exact.size(); ++l) {
                ASSERT_EQ(s.exact_log_weight[l].size(), s.exact[l].size());
                for (float w : s.exact_log_weight[l]) EXPECT_TRUE(std::isfinite(w));
            }
        }
        for (const EstimatedCluster& c : s.estimated) {  // a centroid and value sum for a non-empty cluster
            EXPECT_TRUE(c.centroid != nullptr && c.value_sum != nullptr);
            EXPECT_TRUE(std::isfinite(c.size) && c.size > 0 && c.size <= n - (double)exact_any.size());
        }
        EXPECT_GE(s.scan_ops, 0);
        EXPECT_GE(s.h2d_bytes, 0);
        EXPECT_GE(s.d2h_bytes, 0);
        const Footprint& f = r.fps[(size_t)t];
        EXPECT_TRUE(std::isfinite(f.gpu_bytes) && f.gpu_bytes >= 0);
        EXPECT_TRUE(std::isfinite(f.cpu_bytes) && f.cpu_bytes >= 0);
    }
}

TEST_P(Conformance, TheSameSeedSelectsTheSameAndACopySelectsAsAFreshBuild) {
    const HeadSlice& h = conformance_head();
    const json params = params_for(info());
    const Replay a = replay(h, GetParam(), params), b = replay(h, GetParam(), params);
    EXPECT_EQ(lists(a), lists(b)) << "two instances with the same seed selected differently";
    auto built = make_method(GetParam(), params);
    built->build(context_of(h), KVView{h.keys.data(), h.values.data(), h.prompt_len, h.head_dim});
    auto fresh = make_method(GetParam(), params);
    std::unique_ptr<Method> copy = built->clone_built(*fresh);
    if (!copy) return;  // the method offers no copies of a built index: a fresh build each time
    const Replay c = replay(*copy, h, GetParam(), {10, 100}, 0, /*built=*/true);
    EXPECT_EQ(lists(c), lists(a)) << "a copy of a built instance selected differently from a fresh build";
}

class BudgetConformance : public Conformance {};

TEST_P(BudgetConformance, ABudgetCoveringEveryTokenIsFullAttention) {
    const MethodInfo& m = info();
    const HeadSlice& h = conformance_head();
    json params = params_for(m);
    params["k"] = 1e6;  // more tokens than the head has: every method's budget range reaches it
    params = resolve_params(m, params);
    const Replay r = replay(h, GetParam(), params, {10, 100});
    for (int t = 0; t < h.num_steps; ++t)
        for (int g = 0; g < h.group; ++g) {
            EXPECT_EQ(r.sels[(size_t)t].exact_for(g).size(), (size_t)h.visible(t)) << "step " << t << " head " << g;
            EXPECT_NEAR(r.metrics[(size_t)t][(size_t)g].out_err, 0.0, 1e-4) << "step " << t << " head " << g;
        }
}

INSTANTIATE_TEST_SUITE_P(EveryRegisteredMethod, Conformance, ::testing::ValuesIn(registered()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });
INSTANTIATE_TEST_SUITE_P(EveryMethodWithATokenBudget, BudgetConformance, ::testing::ValuesIn(registered(true)),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });
