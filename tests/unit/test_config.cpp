// Config parsing: sweep expansion, defaults, and every validation error before work starts; "backend"
// and "cuda" (docs/config.md, docs/cuda.md), with the runner refusing a backend that cannot run before
// any work (test doubles of GpuBackend; the real backend's version is in test_cuda_backend.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <tuple>

#include "bench/config.hpp"
#include "gpu/gpu_methods.hpp"
#include "bench/gpu_job_params.hpp"
#include "bench/measured_hardware.hpp"
#include "bench/runner.hpp"
#include "core/error.hpp"
#include "methods/params.hpp"
#include "scratch_dir.hpp"
#include "trace/reader.hpp"
#include "trace/synth.hpp"
#include "trace/writer.hpp"

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

json cuda_config() {
    return json::parse(R"({"name": "t", "traces": ["x.h5"], "backend": "cuda", "cuda": {"batch": [1, 8, 64]},
                           "methods": [{"name": "full"}, {"name": "wave"}]})");
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// A backend that cannot run: what the runner sees on a machine without a usable device.
class UnusableBackend final : public GpuBackend {
  public:
    std::string status() const override { return "no CUDA device (test double)"; }
    std::string device_name() const override { return ""; }
    void check_shape(int, int) const override {}
    std::string library_unsupported(int, int) const override { return ""; }
    MeasuredDevice measure() const override {
        ADD_FAILURE() << "measure called on an unusable backend";
        return {};
    }
    BuiltIndex build_index(const GpuLayerJob&) const override {
        ADD_FAILURE() << "build_index called on an unusable backend";
        return {};
    }
    void run_layer(const GpuLayerJob&, const std::function<void(const GpuStep&)>&) const override {
        ADD_FAILURE() << "run_layer called on an unusable backend";
    }
};
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

TEST(BackendConfig, DefaultIsCpuAndRunIdsAreUnchanged) {
    json j = cuda_config();
    j.erase("backend"), j.erase("cuda");
    const RunConfig c = parse_config(j, "");
    EXPECT_EQ(c.backend, "cpu");
    ASSERT_EQ(c.runs.size(), 2u);
    EXPECT_EQ(c.runs[0].batch, 0);
    EXPECT_EQ(c.runs[0].label(), "full(offloaded=false)");
}

// wave's KV placement is a sweep axis of wave's points only (cuda.wave_kv, issue 41 #1); the default
// ("host") leaves labels, run ids and the resolved cuda section as they were; the gather and host-thread
// knobs reach the job; bad values are named.
TEST(BackendConfig, WaveKvPlacementIsASweepAxisAndKnobsReachTheJob) {
    const RunConfig base = parse_config(cuda_config(), "");
    EXPECT_FALSE(base.resolved()["cuda"].contains("wave_kv"));
    json j = cuda_config();
    j["cuda"]["wave_kv"] = {"host", "gpu"};
    j["cuda"]["device_gather"] = false;
    j["cuda"]["host_threads"] = 3;
    j["cuda"]["warm_steps"] = 2;
    const RunConfig c = parse_config(j, "");
    EXPECT_EQ(c.cuda.warm_steps, 2);
    EXPECT_EQ(c.resolved()["cuda"]["warm_steps"], 2);
    ASSERT_EQ(c.runs.size(), 9u);  // full's 3 batches + wave's 3 batches x 2 placements
    EXPECT_EQ(c.runs[3].label(), base.runs[3].label());  // host: as before
    EXPECT_EQ(c.runs[4].label(), base.runs[3].label().substr(0, base.runs[3].label().size() - 1) + ",kv=gpu)");
    EXPECT_EQ(c.resolved()["runs"][4]["kv"], "gpu");
    EXPECT_EQ(c.resolved()["cuda"]["wave_kv"], json({"host", "gpu"}));
    PreparedTrace t;
    t.trace_id = "trace";
    t.steps = {0};
    EXPECT_EQ(run_id_for(t, c.runs[3], c), run_id_for(t, base.runs[3], base));
    EXPECT_NE(run_id_for(t, c.runs[4], c), run_id_for(t, c.runs[3], c));
    const GpuLayerJob host = gpu_job_for(c.runs[3], c.cuda, "t"), gpu = gpu_job_for(c.runs[4], c.cuda, "t");
    EXPECT_FALSE(host.kv_on_gpu);
    EXPECT_TRUE(gpu.kv_on_gpu);
    EXPECT_FALSE(gpu.wave_device_gather);
    EXPECT_EQ(gpu.host_threads, 3);
    for (const auto& [key, value, want] :
         {std::tuple<const char*, json, const char*>{"wave_kv", "hbm", "cuda.wave_kv = \"hbm\": expected \"host\" or \"gpu\""},
          {"wave_kv", json::array({"gpu", "gpu"}), "duplicate entries"},
          {"device_gather", 1, "cuda.device_gather = 1: expected true or false"},
          {"host_threads", -1, "cuda.host_threads = -1: expected an integer in [0, 256]"},
          {"warm_steps", 1.5, "cuda.warm_steps = 1.5: expected an integer in [0, 100000]"}}) {
        json bad = cuda_config();
        bad["cuda"][key] = value;
        EXPECT_TRUE(has(error_of(bad), want)) << key << ": " << error_of(bad);
    }
    // the asynchronous cache update reaches the job, is kept in the manifest, and needs the device path
    json a = cuda_config();
    a["cuda"]["async_update"] = true;
    const RunConfig ac = parse_config(a, "");
    EXPECT_TRUE(ac.resolved()["cuda"]["async_update"].get<bool>());
    EXPECT_FALSE(base.resolved()["cuda"].contains("async_update"));  // the default leaves manifests as they were
    EXPECT_TRUE(gpu_job_for(ac.runs[3], ac.cuda, "t").async_update);
    EXPECT_FALSE(gpu_job_for(base.runs[3], base.cuda, "t").async_update);
    a["cuda"]["device_gather"] = false;
    EXPECT_TRUE(has(error_of(a), "cuda.async_update = true needs device_gather true")) << error_of(a);
    a["cuda"]["async_update"] = "yes";
    EXPECT_TRUE(has(error_of(a), "cuda.async_update = \"yes\": expected true or false")) << error_of(a);
}

// pq's KV placement is the same axis (issue 41 #3: PQCache offloaded through the block cache, or in HBM); its
// records say the placement but not wave's lookups; the asynchronous update reaches its job too.
TEST(BackendConfig, PqTakesTheKvPlacementAxis) {
    json j = json::parse(R"({"name": "t", "traces": ["x.h5"], "backend": "cuda", "cuda": {"batch": 1,
        "wave_kv": ["host", "gpu"]}, "methods": [{"name": "pq"}, {"name": "quest", "params": {"placement": "gpu"}}]})");
    const RunConfig c = parse_config(j, "");
    ASSERT_EQ(c.runs.size(), 3u);  // pq on host and gpu, quest without the axis
    EXPECT_EQ(c.runs[0].kv, "");
    EXPECT_EQ(c.runs[1].kv, "gpu");
    EXPECT_TRUE(has(c.runs[1].label(), "kv=gpu")) << c.runs[1].label();
    EXPECT_FALSE(gpu_job_for(c.runs[0], c.cuda, "t").kv_on_gpu);
    EXPECT_TRUE(gpu_job_for(c.runs[1], c.cuda, "t").kv_on_gpu);
    EXPECT_TRUE(find_gpu_method("pq")->kv_axis);
    EXPECT_FALSE(find_gpu_method("pq")->lookup_axis);
    EXPECT_TRUE(find_gpu_method("wave")->lookup_axis);
    j["cuda"]["async_update"] = true;  // PQCache's asynchronous cache update reaches the job
    const RunConfig a = parse_config(j, "");
    EXPECT_TRUE(gpu_job_for(a.runs[0], a.cuda, "t").async_update);
}

// cuda.sequences (issue 40 #1): batches of distinct sequences, kept in the manifest when not 1, taken by every
// GPU twin, refused out of its range by name.
TEST(BackendConfig, SequencesAreCheckedAndKept) {
    json j = cuda_config();
    EXPECT_FALSE(parse_config(j, "").resolved()["cuda"].contains("sequences"));
    j["cuda"]["sequences"] = 4;
    const RunConfig c = parse_config(j, "");
    EXPECT_EQ(c.cuda.sequences, 4);
    EXPECT_EQ(c.resolved()["cuda"]["sequences"], 4);
    for (const json& bad : {json(0), json(65), json(1.5), json("2")}) {
        json b = cuda_config();
        b["cuda"]["sequences"] = bad;
        EXPECT_TRUE(has(error_of(b), "cuda.sequences = " + bad.dump() + ": expected an integer in [1, 64]")) << error_of(b);
    }
    j["methods"] = json::parse(R"([{"name": "magicpig"}, {"name": "faiss_hnsw", "params": {"placement": "cpu_attention"}}])");
    EXPECT_EQ(parse_config(j, "").cuda.sequences, 4);  // the host-side twins too
}

// cuda.step_graph (issue 40 #6): kept in the manifest, reaching the job; refused by name for a method whose step
// is not one graph, and for wave's host lookups and asynchronous update (their host work sits inside the step).
TEST(BackendConfig, StepGraphIsCheckedAndKept) {
    json j = cuda_config();
    EXPECT_FALSE(parse_config(j, "").resolved()["cuda"].contains("step_graph"));
    j["cuda"]["step_graph"] = true;
    const RunConfig c = parse_config(j, "");
    EXPECT_TRUE(c.cuda.step_graph);
    EXPECT_EQ(c.resolved()["cuda"]["step_graph"], true);
    EXPECT_TRUE(gpu_job_for(c.runs[0], c.cuda, "t").step_graph);
    json bad = j;
    bad["cuda"]["step_graph"] = "yes";
    EXPECT_TRUE(has(error_of(bad), "step_graph = \"yes\": expected true or false")) << error_of(bad);
    json quest = j;
    quest["methods"] = json::parse(R"([{"name": "quest", "params": {"placement": "gpu"}}])");
    EXPECT_TRUE(has(error_of(quest), "quest on the GPU does not run its step as one CUDA graph")) << error_of(quest);
    json host = j;
    host["cuda"]["device_gather"] = false;
    EXPECT_TRUE(has(error_of(host), "wave with cuda.step_graph needs its device path")) << error_of(host);
}

TEST(BackendConfig, BatchIsASweepAxis) {
    const RunConfig c = parse_config(cuda_config(), "");
    EXPECT_EQ(c.backend, "cuda");
    ASSERT_EQ(c.runs.size(), 6u);  // 2 methods x 3 batches
    EXPECT_EQ(c.runs[0].batch, 1);
    EXPECT_EQ(c.runs[2].batch, 64);
    EXPECT_EQ(c.runs[2].label(), "full(offloaded=false)@cuda(batch=64,kernel=flashinfer)");
    EXPECT_EQ(c.runs[3].method, "wave");
    EXPECT_EQ(c.runs[3].label().find("kernel"), std::string::npos);  // wave has no kernel axis
    EXPECT_EQ(c.resolved()["cuda"]["batch"], json({1, 8, 64}));
    EXPECT_EQ(c.resolved()["runs"][1]["batch"], 8);
    // run ids differ by batch and from the CPU backend's
    PreparedTrace t;
    t.trace_id = "trace";
    t.steps = {0};
    std::set<std::string> ids;
    for (const auto& r : c.runs) ids.insert(run_id_for(t, r, c));
    MethodRun cpu = c.runs[0];
    cpu.batch = 0;
    ids.insert(run_id_for(t, cpu, c));
    EXPECT_EQ(ids.size(), 7u);
    // full's kernel is one more axis of full's points only: 3 batches x 2 kernels + wave's 3
    json two = cuda_config();
    two["cuda"]["full_kernel"] = {"flashinfer", "own"};
    const RunConfig c2 = parse_config(two, "");
    ASSERT_EQ(c2.runs.size(), 9u);
    EXPECT_EQ(c2.runs[1].label(), "full(offloaded=false)@cuda(batch=1,kernel=own)");
    EXPECT_EQ(c2.resolved()["runs"][1]["kernel"], "own");
    std::set<std::string> ids2;
    for (const auto& r : c2.runs) ids2.insert(run_id_for(t, r, c2));
    EXPECT_EQ(ids2.size(), c2.runs.size());  // the two kernels' runs are kept apart
}

// The cuda backend's cost model is calibrated by its device unless the config names a profile; the CPU
// backend has no device: "measured" is refused there by name.
TEST(BackendConfig, CudaDefaultsToMeasuredHardware) {
    EXPECT_EQ(parse_config(cuda_config(), "").hardware, "measured");
    json j = cuda_config();
    j["hardware"] = "h200";
    EXPECT_EQ(parse_config(j, "").hardware, "h200");
    j = cuda_config();
    j.erase("backend"), j.erase("cuda");
    EXPECT_EQ(parse_config(j, "").hardware, "a100-80gb-pcie4");
    j["hardware"] = "measured";
    EXPECT_TRUE(has(error_of(j), "hardware \"measured\" calibrates the cost model by the GPU a run is on: it needs "
                                 "\"backend\": \"cuda\"")) << error_of(j);
}

// measured_spec: the measured fields replace the base profile's (efficiencies 1: achieved rates), the rest
// stay; a measurement that is not positive is refused naming it.
TEST(MeasuredHardware, MeasuredFieldsReplaceTheBaseProfiles) {
    const HardwareProfile base = load_hardware_profile("h100-sxm-pcie5");
    MeasuredDevice m{"NVIDIA H100 80GB HBM3", 2.9e12, 55e9, 52e9, 8.5, 80.0 * (1ull << 30)};
    EXPECT_EQ(base_profile_for(m.device), "h100-sxm-pcie5");
    EXPECT_EQ(base_profile_for("NVIDIA H200"), "h200");
    const HardwareSpec s = measured_spec(base, m);
    EXPECT_EQ(s.name, "measured:NVIDIA H100 80GB HBM3");
    EXPECT_DOUBLE_EQ(s.hbm_B_per_us(), 2.9e12 / 1e6);
    EXPECT_DOUBLE_EQ(s.h2d_B_per_us(), 55e9 / 1e6);
    EXPECT_DOUBLE_EQ(s.d2h_B_per_us(), 52e9 / 1e6);
    EXPECT_DOUBLE_EQ(s.pcie_latency_us, 8.5);
    EXPECT_DOUBLE_EQ(s.gpu_memory_GiB, 80.0);
    EXPECT_DOUBLE_EQ(s.gpu_tflops, base.gpu_tflops);  // not measured: the base profile's
    EXPECT_DOUBLE_EQ(s.cpu_cores, base.cpu_cores);
    m.h2d_bytes_per_s = 0;
    try {
        measured_spec(base, m);
        ADD_FAILURE() << "a zero measurement was accepted";
    } catch (const ParamError& e) {
        EXPECT_TRUE(has(e.what(), "pinned host-to-device bytes/s = 0")) << e.what();
    }
    // the profile the runner records: every measured field's source says it was measured
    m.h2d_bytes_per_s = 55e9;
    const HardwareProfile p = measured_profile(m);
    for (const std::string& f : measured_fields())
        EXPECT_TRUE(has(p.sources[f].get<std::string>(), "NVIDIA H100 80GB HBM3")) << f << ": " << p.sources[f];
    EXPECT_EQ(p.sources["gpu_tflops"], base.sources["gpu_tflops"]);
    EXPECT_NO_THROW(HardwareProfile::from_json(p.to_json(), "round trip"));
}

TEST(BackendConfig, ErrorsNameTheKeyAndTheChoices) {
    json j = cuda_config();
    j["backend"] = "tpu";
    const std::string e = error_of(j);
    EXPECT_TRUE(has(e, "backend = \"tpu\"")) << e;
    EXPECT_TRUE(has(e, "expected \"cpu\" or \"cuda\"")) << e;
    EXPECT_EQ(e.rfind("cfg.json", 0), 0u);

    j = cuda_config();
    j["backend"] = "cpu";
    EXPECT_TRUE(has(error_of(j), "a \"cuda\" section needs \"backend\": \"cuda\"")) << error_of(j);

    j = cuda_config();
    j["cuda"] = {{"batch", {1, 0}}};
    EXPECT_TRUE(has(error_of(j), "cuda.batch")) << error_of(j);
    j["cuda"] = {{"batch", {2, 2}}};
    EXPECT_TRUE(has(error_of(j), "duplicate")) << error_of(j);
    j["cuda"] = {{"kmeans", "tpu"}};
    EXPECT_TRUE(has(error_of(j), "cuda.kmeans")) << error_of(j);
    j["cuda"] = {{"batchs", 1}};
    EXPECT_TRUE(has(error_of(j), "unknown key 'batchs'")) << error_of(j);
    j["cuda"] = {{"full_kernel", "tensorrt"}};
    EXPECT_TRUE(has(error_of(j), "cuda.full_kernel = \"tensorrt\": expected \"flashinfer\", \"cudnn\" or \"own\""))
        << error_of(j);
    j["cuda"] = {{"full_kernel", {"own", "own"}}};
    EXPECT_TRUE(has(error_of(j), "cuda.full_kernel = [\"own\",\"own\"]: duplicate entries")) << error_of(j);
    j["cuda"] = {{"full_kernel", "own"}};
    EXPECT_EQ(error_of(j), "");
    j["cuda"] = {{"launch_gate", "yes"}};
    EXPECT_TRUE(has(error_of(j), "cuda.launch_gate = \"yes\": expected true or false")) << error_of(j);
    j["cuda"] = {{"launch_gate", false}};
    EXPECT_EQ(error_of(j), "");
    EXPECT_FALSE(CudaOptions::from_json(j["cuda"], "cuda").launch_gate);
    EXPECT_TRUE(CudaOptions::from_json(json::object(), "cuda").launch_gate);  // the default
    EXPECT_FALSE(CudaOptions::from_json(json::object(), "cuda").to_json().contains("launch_gate"));
    EXPECT_EQ(CudaOptions::from_json(j["cuda"], "cuda").to_json()["launch_gate"], false);

    j = cuda_config();
    j["methods"] = json::parse(R"([{"name": "ctkvr"}])");
    EXPECT_TRUE(has(error_of(j), "backend 'cuda' runs the methods with a GPU twin only (" + gpu_method_names() +
                                     "), not 'ctkvr'"))
        << error_of(j);
    j["methods"] = json::parse(R"([{"name": "quest"}])");  // a twin's required parameter value, named
    EXPECT_TRUE(has(error_of(j), "quest parameter 'placement' = \"offload\": the GPU path takes \"gpu\" only")) << error_of(j);
    j["methods"] = json::parse(R"([{"name": "quest", "params": {"placement": "gpu"}}])");
    EXPECT_EQ(error_of(j), "");
    j["methods"] = json::parse(R"([{"name": "wave", "params": {"gqa": "max"}}])");
    EXPECT_TRUE(has(error_of(j), "'gqa' = \"max\"")) << error_of(j);
    j["methods"] = json::parse(R"([{"name": "wave", "params": {"seed": 3}}])");
    EXPECT_EQ(error_of(j), "");  // k-means on the CPU takes any seed
    j["cuda"] = {{"kmeans", "gpu"}};
    EXPECT_TRUE(has(error_of(j), "'seed' must be 0")) << error_of(j);

    j = cuda_config();
    j["system"] = {{"policy", {"lru", "belady"}}};
    EXPECT_TRUE(has(error_of(j), "system.policy \"belady\"")) << error_of(j);
    j = cuda_config();
    j["kv_dtype"] = "float32";
    EXPECT_TRUE(has(error_of(j), "stores the KV as float16")) << error_of(j);
}

// The runner refuses a cuda config before it generates a trace or writes a file: with no backend (a
// build without CUDA) and with a backend that reports why it cannot run.
TEST(BackendConfig, UnusableBackendFailsBeforeAnyWork) {
    test::ScratchDir dir;
    json j = cuda_config();
    j["traces"] = json::array({{{"path", dir.path + "/synth.h5"},
                                {"synth", {{"preset", "smollm2"}, {"prompt_len", 256}, {"decode_steps", 2}}}}});
    const RunConfig cfg = parse_config(j, "cfg.json");
    RunnerOptions opt;
    opt.results_root = dir.path + "/results";
    const UnusableBackend unusable;
    for (const GpuBackend* gpu : {(const GpuBackend*)nullptr, (const GpuBackend*)&unusable}) {
        opt.gpu = gpu;
        try {
            run_config(cfg, opt);
            ADD_FAILURE() << "run_config accepted an unusable backend";
        } catch (const ConfigError& e) {
            const std::string m = e.what();
            EXPECT_TRUE(has(m, "backend 'cuda'")) << m;
            EXPECT_TRUE(has(m, gpu ? "no usable CUDA device: no CUDA device (test double)" : "built without CUDA")) << m;
        }
        EXPECT_FALSE(std::filesystem::exists(opt.results_root));
        EXPECT_FALSE(std::filesystem::exists(dir.path + "/synth.h5"));  // no work: the trace was not generated
    }
}

// A synthetic trace file made from other parameters than the config's recipe (an edited recipe, a changed
// preset) is stale: listed as such without generating, regenerated when running; a file that
// retro-bench synth did not make is never overwritten.
TEST(Config, StaleSyntheticTraceIsRegenerated) {
    test::ScratchDir dir;
    const std::string path = dir.path + "/s.h5";
    const auto config_with = [&](int seed) {
        json j = base();
        j["traces"] = json::array({{{"path", path},
                                    {"synth", {{"preset", "smollm2"}, {"num_layers", 1}, {"prompt_len", 256},
                                               {"decode_steps", 2}, {"prefill_queries", 0}, {"seed", seed}}}}});
        return parse_config(j, "cfg.json");
    };
    const auto source_of = [&] { return TraceReader(path).info().source; };
    std::vector<std::string> notes;
    const auto note = [&](const std::string& m) { notes.push_back(m); };

    auto t = prepare_traces(config_with(1), true, note);
    ASSERT_EQ(notes.size(), 2u);
    EXPECT_TRUE(has(notes[0], "generating synthetic trace")) << notes[0];
    const std::string source1 = source_of();
    EXPECT_TRUE(has(source1, "\"seed\":1")) << source1;

    notes.clear();  // same recipe: the file is used as it is
    t = prepare_traces(config_with(1), true, note);
    EXPECT_TRUE(notes.empty());
    EXPECT_FALSE(t[0].stale);

    t = prepare_traces(config_with(2), false, note);  // validate: reported, nothing written
    EXPECT_TRUE(t[0].needs_synth);
    EXPECT_TRUE(t[0].stale);
    EXPECT_TRUE(has(t[0].generation_note(), "stale")) << t[0].generation_note();
    EXPECT_EQ(source_of(), source1);

    t = prepare_traces(config_with(2), true, note);  // run: regenerated from the new recipe
    ASSERT_FALSE(notes.empty());
    EXPECT_TRUE(has(notes[0], "regenerating synthetic trace")) << notes[0];
    EXPECT_FALSE(t[0].stale);
    EXPECT_TRUE(has(source_of(), "\"seed\":2")) << source_of();

    // A file someone else made at that path (a real model's trace): an error naming the path, untouched.
    const SynthParams sp = SynthParams::from_json(config_with(2).traces[0].synth);
    const SynthLayer L = synthesize_layer(sp, 0);
    TraceInfo info = synth_trace_info(sp);
    info.source = "hf:SomeModel";
    info.layers.clear();
    info.num_prefill_queries = 0;
    {
        TraceWriter w(path, info);
        w.write_layer(0, L.keys, L.values, L.queries, L.prefill_queries, 0, sp.prompt_len);
        w.finish();
    }
    try {
        prepare_traces(config_with(2), true, note);
        ADD_FAILURE() << "a non-synthetic file was accepted for a synth recipe";
    } catch (const ConfigError& e) {
        EXPECT_TRUE(has(e.what(), path)) << e.what();
        EXPECT_TRUE(has(e.what(), "not made by retro-bench synth")) << e.what();
    }
    EXPECT_EQ(source_of(), "hf:SomeModel");
}
