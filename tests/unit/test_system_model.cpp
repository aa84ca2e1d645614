// System model: hardware profiles, the "system" config key, HeadSystem accounting, cost model and
// throughput table.
#include <gtest/gtest.h>

#include "bench/config.hpp"
#include "core/error.hpp"
#include "gpu/prediction.hpp"
#include "system/cost_model.hpp"
#include "system/hardware.hpp"
#include "system/head_system.hpp"

using namespace retro;
using json = nlohmann::json;

TEST(SystemHardware, EveryProfileLoadsWithSources) {
    const auto names = list_hardware_profiles();
    for (const char* want : {"a100-80gb-pcie4", "h100-sxm-pcie5", "h200", "rtx4090", "a6000"})
        EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
    for (const auto& n : names) {
        const HardwareProfile hw = load_hardware_profile(n);
        EXPECT_EQ(hw.name, n);
        EXPECT_EQ(hw.sources.size(), 12u);
    }
    const HardwareProfile a = load_hardware_profile("a100-80gb-pcie4");
    EXPECT_DOUBLE_EQ(a.pcie_h2d_GBps, 32);
    EXPECT_DOUBLE_EQ(a.hbm_GBps, 1935);
    EXPECT_THROW(load_hardware_profile("no-such-gpu"), ConfigError);
    json bad = a.to_json();
    bad["hbm_GBps"]["source"] = "";
    EXPECT_THROW(HardwareProfile::from_json(bad, "x"), ConfigError);
    bad = a.to_json();
    bad["extra"] = 1;
    EXPECT_THROW(HardwareProfile::from_json(bad, "x"), ConfigError);
}

namespace {
json sys_config(const json& system) {
    return {{"name", "t"}, {"traces", {"x.h5"}}, {"methods", {{{"name", "full"}}}}, {"system", system}};
}
}  // namespace

TEST(SystemConfig, ParsesExpandsAndValidates) {
    const RunConfig c = parse_config(sys_config({{"cache", {0.0, 0.05}}, {"policy", {"lru", "belady"}}}), "c");
    ASSERT_EQ(c.runs.size(), 4u);
    EXPECT_EQ(c.runs[0].system["cache"], 0.0);
    EXPECT_EQ(c.runs[0].system["block_bytes"], 2048);
    EXPECT_NE(c.runs[0].label(), c.runs[1].label());
    EXPECT_TRUE(c.throughput.is_null());
    // no "system" key: run ids and labels as before
    const RunConfig plain = parse_config({{"name", "t"}, {"traces", {"x.h5"}}, {"methods", {{{"name", "full"}}}}}, "c");
    EXPECT_TRUE(plain.runs[0].system.is_null());
    EXPECT_EQ(plain.runs[0].label(), "full(offloaded=false)");
    const RunConfig tp = parse_config(sys_config({{"throughput", {{"batch", {1, 4}}, {"contexts", {30000}}}}}), "c");
    EXPECT_EQ(tp.throughput["model"], "llama3-8b");
    EXPECT_EQ(tp.resolved()["throughput"]["batch"], json({1, 4}));
    for (const json& bad : {json{{"cache", 1.5}}, json{{"policy", "mru"}}, json{{"block_bytes", 0}},
                            json{{"nope", 1}}, json{{"cache", json::array()}},
                            json{{"throughput", {{"model", "gpt-9"}}}}, json{{"throughput", {{"batch", {0}}}}},
                            json{{"token_block", 1.5}}})
        EXPECT_THROW(parse_config(sys_config(bad), "c"), ConfigError) << bad.dump();
}

namespace {
HeadSystemContext head_ctx(const std::string& method, int prompt) {
    HeadSystemContext c;
    c.method = method;
    c.params = json::object();
    c.head_dim = 128;
    c.group = 4;
    c.elem_bytes = 2;
    c.prompt_len = prompt;
    c.num_kv_heads = 8;
    return c;
}
}  // namespace

TEST(SystemHead, BlockSizeAndCapacityDerivedFromShape) {
    const HardwareProfile hw = load_hardware_profile("a100-80gb-pcie4");
    SystemParams sp;
    HeadSystem h(sp, hw, head_ctx("wave", 32768));
    EXPECT_EQ(h.block_tokens(), 8);                   // 2048 / (128 x 2)
    EXPECT_EQ(h.capacity_slots(), 1638 / 8 * 8);      // 5% of 32768 tokens, whole blocks
    HeadSystemContext c64 = head_ctx("wave", 32768);
    c64.head_dim = 64;
    c64.elem_bytes = 4;
    EXPECT_EQ(HeadSystem(sp, hw, c64).block_tokens(), 8);
    c64.elem_bytes = 2;
    EXPECT_EQ(HeadSystem(sp, hw, c64).block_tokens(), 16);
}

TEST(SystemHead, PostCacheBytesAndHitRatio) {
    const HardwareProfile hw = load_hardware_profile("a100-80gb-pcie4");
    const double tok = 2 * 128 * 2;
    SystemParams sp;
    sp.cache = 1.0;  // everything fits
    HeadSystem h(sp, hw, head_ctx("wave", 1000));
    Selection s;
    s.shared() = {0, 1, 2};
    s.fetch_units = {7, 3};
    s.fetch_unit_tokens = {17, 5};
    s.h2d_bytes = 22 * tok;
    Footprint fp{1000.0, 0.0};
    h.record(s, 1000, fp);
    h.record(s, 1001, fp);
    std::map<std::string, std::vector<double>> kv;
    h.finish(kv);
    ASSERT_EQ(kv["h2d_bytes"].size(), 2u);
    EXPECT_DOUBLE_EQ(kv["h2d_bytes"][0], 22 * tok);  // cold
    EXPECT_DOUBLE_EQ(kv["h2d_bytes"][1], 0.0);       // admitted at step 0, hit at step 1
    EXPECT_DOUBLE_EQ(kv["fetch_bytes"][1], 22 * tok);
    EXPECT_DOUBLE_EQ(kv["cache_hit"][0], 0.0);
    EXPECT_DOUBLE_EQ(kv["cache_hit"][1], 1.0);
    EXPECT_DOUBLE_EQ(kv["gpu_bytes"][0], 1000.0 + 1000 * tok);  // footprint + cache
    EXPECT_GT(kv["model_us"][0], kv["model_us"][1]);             // misses cost PCIe time

    // zero cache: post-cache bytes = the method's own; non-KV bytes pass through
    sp.cache = 0;
    HeadSystem z(sp, hw, head_ctx("wave", 1000));
    s.h2d_bytes = 22 * tok + 100;
    z.record(s, 1000, fp);
    z.record(s, 1001, fp);
    kv.clear();
    z.finish(kv);
    EXPECT_DOUBLE_EQ(kv["h2d_bytes"][1], 22 * tok + 100);
    EXPECT_DOUBLE_EQ(kv["gpu_bytes"][1], 1000.0);
}

TEST(SystemHead, TokenGranularUnits) {
    const HardwareProfile hw = load_hardware_profile("a100-80gb-pcie4");
    const double tok = 2 * 128 * 2;
    SystemParams sp;
    sp.cache = 0;
    sp.token_block = 4;
    HeadSystem h(sp, hw, head_ctx("oracle_topk", 100));
    Selection s;
    s.shared() = {1, 2, 9, 98};
    s.fetch_tokens = {1, 2, 9, 98};
    s.h2d_bytes = 4 * tok;
    h.record(s, 100, {});
    std::map<std::string, std::vector<double>> kv;
    h.finish(kv);
    EXPECT_DOUBLE_EQ(kv["fetch_units"][0], 3);            // blocks [0,4), [8,12), [96,100)
    EXPECT_DOUBLE_EQ(kv["h2d_bytes"][0], 12 * tok);        // whole 4-token blocks move
    // PQCache's fetch: a missed block moves only its requested tokens; the block still fills the cache
    SystemParams needed = sp;
    needed.miss_moves = "needed";
    needed.cache = 1.0;
    HeadSystem hn(needed, hw, head_ctx("oracle_topk", 100));
    hn.record(s, 100, {});
    hn.record(s, 100, {});
    kv.clear();
    hn.finish(kv);
    EXPECT_DOUBLE_EQ(kv["h2d_bytes"][0], 4 * tok);  // 4 needed tokens of 3 missed blocks
    EXPECT_DOUBLE_EQ(kv["h2d_bytes"][1], 0.0);      // the blocks were admitted: all hits
    EXPECT_DOUBLE_EQ(kv["cache_hit"][1], 1.0);
    EXPECT_EQ(needed.to_json().value("miss_moves", ""), "needed");
    EXPECT_FALSE(sp.to_json().contains("miss_moves"));  // default absent: run ids unchanged
    EXPECT_THROW(SystemParams::from_json({{"miss_moves", "block"}}, "system"), ConfigError);
    // methods without units: h2d as reported, no cache, no cache_hit sample
    HeadSystem f(sp, hw, head_ctx("full", 100));
    Selection a;
    a.h2d_bytes = 100 * tok;
    f.record(a, 100, {0.0, 100 * tok});
    kv.clear();
    f.finish(kv);
    EXPECT_DOUBLE_EQ(kv["h2d_bytes"][0], 100 * tok);
    EXPECT_TRUE(kv["cache_hit"].empty());
}

TEST(SystemCost, LayerTimeOverlaps) {
    const HardwareProfile hw = load_hardware_profile("a100-80gb-pcie4");
    LayerWork w;
    w.gpu_read_bytes = 1.548e9;  // 1 ms of HBM at 1935 x 0.8 GB/s
    w.h2d_bytes = 0;
    LayerTime t = layer_time(w, 0, 1, hw, 0);
    EXPECT_NEAR(t.attend_us, 1000, 1e-6);
    EXPECT_NEAR(t.total_us, 1000, 1e-6);
    w.h2d_bytes = 25.6e6;  // 1 ms of PCIe at 32 x 0.8 GB/s (+ latency)
    t = layer_time(w, 0, 1, hw, 0);
    EXPECT_NEAR(t.h2d_us, 1000 + hw.pcie_latency_us, 1e-6);
    EXPECT_NEAR(t.total_us, 2000 + hw.pcie_latency_us, 1e-6);  // serial
    w.overlap = Overlap::stream;
    EXPECT_NEAR(layer_time(w, 0, 1, hw, 0).total_us, 1000 + hw.pcie_latency_us, 1e-6);
    // wave: GPU selection runs beside the CPU lookup
    LayerWork v;
    v.overlap = Overlap::wave;
    v.gpu_read_bytes = 1.548e9;
    v.cpu_us = 500 * hw.cpu_cores;  // 500 us after spreading over the cores
    t = layer_time(v, 1.548e9, 1, hw, 0);
    EXPECT_NEAR(t.total_us, 1000, 1e-6);
    v.overlap = Overlap::serial;
    EXPECT_NEAR(layer_time(v, 1.548e9, 1, hw, 0).total_us, 1500, 1e-6);
}

TEST(SystemCost, FullAttentionBatchLimitMatchesThePaper) {
    // RetroInfer §2.2: an A100-80GB holds Llama3-8B at 128K with batch 4 at most.
    const HardwareProfile hw = load_hardware_profile("a100-80gb-pcie4");
    PerTokenWork full;
    full.attend_kv = 1;
    full.resident_kv = 1;
    const json t = throughput_table(full, Overlap::serial, 0, 4, find_model_shape("llama3-8b"), 2, {131072},
                                    {1, 4, 5}, hw);
    EXPECT_EQ(t["max_batch"]["131072"], 4);
    EXPECT_TRUE(t["rows"][2]["oom"].get<bool>());
    EXPECT_GT(t["rows"][1]["tokens_per_s"].get<double>(), t["rows"][0]["tokens_per_s"].get<double>());
    EXPECT_THROW(find_model_shape("nope"), ConfigError);
}

// ---- the calibrated phase model of the GPU runs (gpu/prediction.hpp PhaseFit) ----

TEST(PhaseFit, RecoversLatencyAndRateFromPointsOnTheLine) {
    std::vector<std::pair<double, double>> pts;
    for (double bytes : {1e5, 1e6, 4e6, 16e6}) pts.push_back({bytes, 20.0 + bytes / 2000.0});
    const PhaseFit f = PhaseFit::fit(pts);
    ASSERT_TRUE(f.fitted());
    EXPECT_NEAR(f.latency_us, 20.0, 1e-6);
    EXPECT_NEAR(f.bytes_per_us, 2000.0, 1e-6);
    EXPECT_NEAR(f.predict_us(64e6), 20.0 + 32000.0, 1e-3);
}

TEST(PhaseFit, LeavesUnfittedWhatTwoDistinctGrowingPointsDoNotDetermine) {
    EXPECT_FALSE(PhaseFit::fit({}).fitted());
    EXPECT_FALSE(PhaseFit::fit({{1e6, 30.0}}).fitted());
    EXPECT_FALSE(PhaseFit::fit({{1e6, 30.0}, {1e6, 40.0}}).fitted());  // one byte count
    EXPECT_FALSE(PhaseFit::fit({{1e6, 40.0}, {2e6, 30.0}}).fitted());  // time falling as bytes grow
}

TEST(PhaseFit, ANegativeLatencyIsRefittedThroughTheOrigin) {
    // least squares through (1000, 0.4) and (2000, 1.0) has latency -0.2; through the origin the rate is
    // sum(x^2) / sum(x y) = 5e6 / 2400
    const PhaseFit f = PhaseFit::fit({{1000.0, 0.4}, {2000.0, 1.0}});
    ASSERT_TRUE(f.fitted());
    EXPECT_EQ(f.latency_us, 0.0);
    EXPECT_NEAR(f.bytes_per_us, 5e6 / 2400.0, 1e-9);
}
