// lib/analysis without the CLI, on a tiny synthetic trace: needle coverage (an oracle that attends every
// token covers any needle, a static pattern covers exactly the needles inside it), centroid rank (the
// oracle ranking bounds the centroid ranking, which bounds its Jensen estimate; all three meet at the
// last rank), the OOD recall of a flat index (exact: recall 1 at a full scan) and its interpolation, and
// the ood-recall config experiment (strict keys, one file per index, --resume skips what is written).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "analysis/centroid_rank.hpp"
#include "analysis/head_selection.hpp"
#include "analysis/needle.hpp"
#include "analysis/ood_recall_config.hpp"
#include "analysis/ood_recall_run.hpp"
#include "core/error.hpp"
#include "methods/params.hpp"
#include "scratch_dir.hpp"
#include "trace/synth.hpp"

using namespace retro;
using json = nlohmann::json;

namespace {

// One shared trace for the file: smollm2-shaped (3 KV heads x 3 query heads, d 64), 1 layer, 512 prompt
// tokens, 4 decode steps.
const std::string& tiny_trace() {
    static test::ScratchDir dir;
    static const std::string path = [] {
        SynthParams p = SynthParams::preset("smollm2");
        p.num_layers = 1, p.prompt_len = 512, p.decode_steps = 4, p.prefill_queries = 16;
        const std::string out = dir.path + "/tiny.h5";
        synthesize(p, out);
        return out;
    }();
    return path;
}

NeedleMethod method(const std::string& label, const std::string& name, const json& given) {
    return {label, name, resolve_params(find_method(name), given)};
}

}  // namespace

TEST(Analysis, HeadSelectionChecksTheTrace) {
    TraceReader reader(tiny_trace());
    const HeadSelection all = select_heads(reader, tiny_trace(), "", "");
    EXPECT_EQ(all.layers, std::vector<int>({0}));
    EXPECT_EQ(all.kv_heads, std::vector<int>({0, 1, 2}));
    EXPECT_EQ(head_refs(select_heads(reader, tiny_trace(), "0", "2,0")).size(), 2u);
    EXPECT_THROW(select_heads(reader, tiny_trace(), "1", ""), ConfigError);
    EXPECT_THROW(select_heads(reader, tiny_trace(), "", "3"), ConfigError);
    EXPECT_THROW(parse_int_list("1,x", "layers"), ConfigError);
    EXPECT_EQ(join_ints({1, 2, 4}), "1,2,4");
}

TEST(Analysis, NeedleCoverageOfTheOracleAndAStaticPattern) {
    TraceReader reader(tiny_trace());
    const HeadSelection heads = select_heads(reader, tiny_trace(), "", "");
    NeedleParams p;
    p.methods = {method("everything", "oracle_topk", {{"k", 100000}}),
                 method("sinks", "streaming", {{"sink", 8}, {"window", 16}})};
    p.first_token = 2, p.end_token = 6;  // inside the 8 sinks
    p.threads = 1;
    std::vector<NeedleHeadRow> rows = needle_coverage(reader, heads, p);
    ASSERT_EQ(rows.size(), 9u);  // 1 layer x 9 query heads
    for (size_t r = 0; r < rows.size(); ++r) {
        const auto& x = rows[r];
        if (r > 0) {
            EXPECT_GE(rows[r - 1].needle_mass, x.needle_mass);
        }
        EXPECT_GT(x.needle_mass, 0.0);
        EXPECT_LE(x.needle_mass, 1.0 + 1e-9);
        EXPECT_NEAR(x.needle_mass_sum, 4 * x.needle_mass, 1e-9);  // 4 decode steps
        for (size_t m = 0; m < 2; ++m) {
            EXPECT_DOUBLE_EQ(x.in_exact[m], 1.0) << m;
            EXPECT_DOUBLE_EQ(x.all_exact[m], 1.0) << m;
            EXPECT_NEAR(x.covered[m], 1.0, 1e-9) << m;
        }
    }
    // a needle in the middle of the prompt: the oracle still covers it, the static pattern never does
    p.first_token = 200, p.end_token = 210;
    p.first_step = 1, p.end_step = 3;
    rows = needle_coverage(reader, heads, p);
    const NeedleSummary s = summarize_needle(rows, 2, 3);
    EXPECT_EQ(s.top, 3);
    EXPECT_DOUBLE_EQ(s.all_in_exact[0], 1.0);
    EXPECT_DOUBLE_EQ(s.all_in_exact[1], 0.0);
    EXPECT_DOUBLE_EQ(s.top_covered[1], 0.0);
    const json j = needle_json(tiny_trace(), p, rows);
    EXPECT_EQ(j["needle_tokens"], json({200, 210}));
    EXPECT_EQ(j["heads"].size(), 9u);
    EXPECT_EQ(j["methods"][1]["params"]["sink"], 8);

    p.end_token = 600;  // past the prompt
    EXPECT_THROW(needle_coverage(reader, heads, p), ConfigError);
    p.end_token = 210, p.end_step = 5;  // past the decode steps
    EXPECT_THROW(needle_coverage(reader, heads, p), ConfigError);
    EXPECT_THROW(needle_tokens_of(reader.info(), tiny_trace()), ConfigError);  // synthetic: no attribute
}

TEST(Analysis, CentroidRankIsBoundedByTheOracle) {
    TraceReader reader(tiny_trace());
    const HeadSelection heads = select_heads(reader, tiny_trace(), "", "0,1");
    CentroidRankParams p;
    p.step_stride = 2;
    const CentroidRankCurves c = centroid_rank(reader, heads, p, 1);
    EXPECT_NEAR(c.clusters, (512 - 64 - 4) / 16.0, 1.0);  // one centroid per 16 tokens outside the steady zone
    EXPECT_EQ(c.queries_per_head, 3 * 2);        // 3 query heads x steps 0 and 2
    ASSERT_EQ(c.ranks.front(), 1);
    ASSERT_EQ(c.ranks.back(), c.clusters);
    for (size_t i = 0; i < c.ranks.size(); ++i) {
        if (i > 0) {
            EXPECT_GT(c.ranks[i], c.ranks[i - 1]);
            EXPECT_GE(c.cen_true[i], c.cen_true[i - 1] - 1e-12);
            EXPECT_GE(c.oracle[i], c.oracle[i - 1] - 1e-12);
        }
        EXPECT_LE(c.cen_true[i], c.oracle[i] + 1e-12) << c.ranks[i];
        EXPECT_LE(c.cen_est[i], c.cen_true[i] + 1e-12) << c.ranks[i];  // Jensen: a lower bound
    }
    EXPECT_GT(c.clustered, 0.0);
    EXPECT_LT(c.clustered, 1.0);  // the steady zone and decode tokens hold the rest
    EXPECT_NEAR(c.cen_true.back(), c.clustered, 1e-9);
    EXPECT_NEAR(c.oracle.back(), c.clustered, 1e-9);
    const json j = centroid_rank_json(tiny_trace(), heads, 512, p, c);
    EXPECT_EQ(j["series"].size(), 3u);
    EXPECT_EQ(j["series"][2]["cum_attention"].size(), c.ranks.size());

    p.iters = 0;
    EXPECT_THROW(centroid_rank(reader, heads, p, 1), ConfigError);
    p.iters = 10, p.window = 500;  // nothing left to cluster
    EXPECT_THROW(centroid_rank(reader, heads, p, 1), ConfigError);
}

TEST(Analysis, ScannedAtInterpolatesBetweenSettings) {
    const std::vector<double> scanned = {0.1, 0.2, 0.4}, recall = {0.5, 0.7, 0.9};
    EXPECT_DOUBLE_EQ(scanned_at(scanned, recall, 0.4), 0.1);   // reached at the first setting
    EXPECT_NEAR(scanned_at(scanned, recall, 0.8), 0.3, 1e-12);  // half way from 0.2 to 0.4
    EXPECT_TRUE(std::isnan(scanned_at(scanned, recall, 0.95)));
}

TEST(Analysis, OodRecallOfAFlatIndexIsExact) {
    OodRecallArgs a;
    a.trace = tiny_trace();
    a.index = "flat";
    a.k = 10;
    a.key_queries = 8;
    a.kv_heads = "1";
    a.threads = 1;
    const OodRecallReport r = run_ood_recall(a);
    ASSERT_EQ(r.per_head.size(), 1u);
    ASSERT_EQ(r.mean.size(), 1u);
    EXPECT_EQ(r.per_head[0].n_keys, 512);
    EXPECT_EQ(r.per_head[0].n_decode, 3 * 4);
    EXPECT_EQ(r.per_head[0].n_key_queries, 8);
    EXPECT_DOUBLE_EQ(r.mean[0].recall_decode, 1.0);
    EXPECT_DOUBLE_EQ(r.mean[0].recall_keys, 1.0);
    EXPECT_DOUBLE_EQ(r.mean[0].scanned_decode, 1.0);
    ASSERT_EQ(r.reach.size(), 3u);
    EXPECT_DOUBLE_EQ(r.reach[2].decode, 1.0);
    const json j = ood_recall_json(r);
    EXPECT_EQ(j["heads"][0]["kv_head"], 1);
    EXPECT_EQ(j["mean"][0]["setting"], "flat");

    a.nprobe = "4,0";
    a.index = "ivf";
    EXPECT_THROW(run_ood_recall(a), ConfigError);
}

TEST(Analysis, OodRecallConfigWritesOneFilePerIndexAndResumes) {
    test::ScratchDir dir;
    json j = {{"name", "ood"},
              {"experiment", "ood-recall"},
              {"traces", {tiny_trace()}},
              {"kv_heads", {0}},
              {"k", 10},
              {"key_queries", 4},
              {"indexes", {{{"index", "ivf"}, {"nlist", 8}, {"nprobe", {1, 8}}}, {{"index", "flat"}, {"mips", "l2_transform"}}}}};
    EXPECT_TRUE(is_ood_recall_config(j));
    const OodRecallExperiment e = parse_ood_recall_config(j, "ood.json");
    ASSERT_EQ(e.entries.size(), 2u);
    EXPECT_EQ(e.entries[0].nprobe, "1,8");
    EXPECT_EQ(e.entries[0].kv_heads, "0");
    int reported = 0;
    const OodRecallConfigRun opt{.results_root = dir.path, .threads = 1};
    const auto n = run_ood_recall_config(e, opt, {}, [&](const OodRecallReport& r, const std::string& file) {
        ++reported;
        EXPECT_TRUE(std::filesystem::exists(file)) << file;
        EXPECT_EQ(r.mean.size(), r.args.index == "ivf" ? 2u : 1u);
    });
    EXPECT_EQ(n.written, 2);
    EXPECT_EQ(reported, 2);
    EXPECT_TRUE(std::filesystem::exists(dir.path + "/ood/ood-recall-ivf-tiny.json"));
    EXPECT_TRUE(std::filesystem::exists(dir.path + "/ood/ood-recall-flat-l2_transform-tiny.json"));
    EXPECT_THROW(run_ood_recall_config(e, opt, {}, {}), ConfigError);  // results exist: resume or force
    const auto again = run_ood_recall_config(e, {.results_root = dir.path, .resume = true}, {}, {});
    EXPECT_EQ(again.written, 0);
    EXPECT_EQ(again.skipped, 2);

    j["indexes"][0]["nprob"] = {1};
    EXPECT_THROW(parse_ood_recall_config(j, "ood.json"), ConfigError);
    j["indexes"][0].erase("nprob");
    j["indexes"][1]["index"] = "lsh";
    EXPECT_THROW(parse_ood_recall_config(j, "ood.json"), ConfigError);
}
