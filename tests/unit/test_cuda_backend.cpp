// The CUDA backend's run path (kernels/run, docs/cuda.md) against the CPU methods: the wave path makes
// the CPU wave method's selections with outputs within fp16 tolerance (GPU block cache, index updates and
// replicas included) and moves exactly the PCIe bytes the system model replays; full attention equals
// exact attention; `retro-bench run` with "backend": "cuda" gives the CPU backend's accuracy metrics.
// Compiled twice: into retro_backend_emulation against the CPU emulation of the kernel API
// (RETRO_GPU_EMULATION: runs everywhere; tests the orchestration, not the kernels), and into
// retro_unit_tests against the CUDA kernels (RETRO_HAVE_CUDA: skipped without a usable device).
#include <gtest/gtest.h>

#if defined(RETRO_GPU_EMULATION) || defined(RETRO_HAVE_CUDA)
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <chrono>
#include <thread>

#include "bench/config.hpp"
#include "bench/gpu_job_params.hpp"
#include "gpu/gpu_methods.hpp"
#include "bench/runner.hpp"
#include "bench/summary.hpp"
#include "core/fs.hpp"
#include "core/half.hpp"
#include "core/host.hpp"
#include "cuda_api.hpp"
#include "method_harness.hpp"
#include "scratch_dir.hpp"
#include "methods/wave.hpp"
#include "run/cuda_backend.hpp"
#include "run/host_pool.hpp"
#include "run/layer_runs.hpp"
#include "run/wave_vs_full.hpp"
#include "system/hardware.hpp"
#include "system/head_system.hpp"
#include "trace/synth.hpp"

using namespace retro;
using namespace retro::method_test;
using retro::test::ScratchDir;
using json = nlohmann::json;

#ifdef RETRO_GPU_EMULATION
#define BACKEND_TEST(name) TEST(CudaBackendEmulated, name)
#define REQUIRE_DEVICE()
constexpr double kTieSlack = 0;  // deterministic: the emulation's rankings are fixed for these inputs
#else
constexpr double kTieSlack = 0.02;  // a near-tie swapped by the GPU's float order may move a metric a little
#define BACKEND_TEST(name) TEST(CudaBackend, name)
#define REQUIRE_DEVICE() \
    if (!cuda::device_available()) GTEST_SKIP() << "no usable CUDA device: " << cuda::device_status()
#endif

namespace {

constexpr int kG = 4, kD = 64;

/// H KV heads of one layer: clustered keys, queries near the clusters (method_harness blob heads); spread:
/// keys and queries spread wider around the clusters (other seeds).
std::vector<HeadSlice> layer_heads(int H, int prompt, int steps, bool spread = false, int prefill = 0) {
    std::vector<HeadSlice> heads;
    for (int h = 0; h < H; ++h) {
        heads.push_back(blob_head({.prompt_len = prompt, .steps = steps, .d = kD, .group = kG,
                                   .seed = (spread ? 31u : 11u) + h, .centers = 24, .center_scale = spread ? 1.0f : 1.5f,
                                   .offset_scale = 1.0f, .key_noise = spread ? 1.5f : 0.5f, .query_scale = 1.5f,
                                   .query_noise = spread ? 1.5f : 0.5f, .prefill = prefill}));
        heads.back().kv_head = h;
        heads.back().first_q_head = h * kG;
    }
    return heads;
}

double rel_l2(const float* a, const float* b, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; ++i) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
    return std::sqrt(num / den);
}

std::vector<int32_t> sorted(std::span<const int32_t> v) {
    std::vector<int32_t> s(v.begin(), v.end());
    std::sort(s.begin(), s.end());
    return s;
}

/// The estimated clusters as comparable values: (size, centroid, value sum), sorted.
std::vector<std::vector<float>> estimated_of(const Selection& s, int d) {
    std::vector<std::vector<float>> out;
    for (const auto& c : s.estimated) {
        std::vector<float> row{(float)c.size};
        row.insert(row.end(), c.centroid, c.centroid + d);
        row.insert(row.end(), c.value_sum, c.value_sum + d);
        out.push_back(std::move(row));
    }
    std::sort(out.begin(), out.end());
    return out;
}

/// The CPU's approximate output for a selection, what Evaluator::evaluate attends (float32 KV); returns its LSE.
double cpu_output(const HeadSlice& h, int j, int t, const Selection& s, float* out) {
    const float* q = h.query(j, t);
    const float scale = 1.0f / std::sqrt((float)h.head_dim);
    PartialAttention p =
        partial_attention_ids(q, h.keys.data(), h.values.data(), s.exact_for(j), h.head_dim, scale, s.log_weight_for(j));
    for (const auto& c : s.estimated) {
        float dot = 0;
        for (int e = 0; e < h.head_dim; ++e) dot += q[e] * c.centroid[e];
        add_estimated_cluster(p, (double)scale * dot, c.size, c.value_sum, h.head_dim);
    }
    p.output(out);
    return p.lse();
}

/// KV head h's outputs of step st (all B replicas of H heads) against the CPU's attention over the GPU's
/// selection `got`: raises worst_out (relative L2) and worst_lse; fails when a replica differs from replica 0.
void compare_head_outputs(const GpuStep& st, const HeadSlice& hs, int h, int H, int B, const Selection& got,
                          double& worst_out, double& worst_lse) {
    float approx[kD];
    for (int j = 0; j < kG; ++j) {
        const double lse = cpu_output(hs, j, st.step, got, approx);
        const size_t qh = (size_t)h * kG + j;
        worst_out = std::max(worst_out, rel_l2(st.out + qh * kD, approx, kD));
        worst_lse = std::max(worst_lse, std::abs(st.lse[qh] - lse));
        for (int b = 1; b < B; ++b)
            for (int e = 0; e < kD; ++e)
                if (st.out[((size_t)b * H * kG + qh) * kD + e] != st.out[qh * kD + e]) {
                    ADD_FAILURE() << "replica " << b << " differs from replica 0, query head " << qh;
                    return;
                }
    }
}

/// The CPU methods of the heads told of decode steps (last, step], as the runner tells them.
void append_steps(std::vector<std::unique_ptr<Method>>& cpu, const std::vector<HeadSlice>& heads, int prompt, int last,
                  int step) {
    for (int t = last + 1; t <= step; ++t)
        for (size_t h = 0; h < heads.size(); ++h)
            cpu[h]->append(KVView{heads[h].keys.data(), heads[h].values.data(), prompt + t + 1, kD}, prompt + t);
}

/// The cuda backend runs fp16 KV (check_cuda_trace): the CPU twin is to see the same values.
void round_kv_to_half(std::vector<HeadSlice>& heads) {
    for (HeadSlice& h : heads)
        for (std::vector<float>* x : {&h.keys, &h.values})
            for (float& v : *x) v = half_to_float(float_to_half(v));
}

/// The group's queries of step t: [kG, kD].
std::vector<float> group_queries(const HeadSlice& hs, int t) {
    std::vector<float> q((size_t)kG * kD);
    for (int j = 0; j < kG; ++j) std::copy(hs.query(j, t), hs.query(j, t) + kD, q.begin() + j * kD);
    return q;
}

/// The CPU method's selection at step st (its group's queries over st.n visible tokens).
Selection cpu_select(Method& m, const HeadSlice& hs, const GpuStep& st) {
    const std::vector<float> q = group_queries(hs, st.step);
    Selection want;
    m.select(q.data(), st.step, KVView{hs.keys.data(), hs.values.data(), st.n, kD}, want);
    return want;
}

/// A synthetic Llama-3-8B-shaped trace of `layers` layers, `prompt` tokens, 3 decode steps and `prefill` prefill
/// queries in dir: its path.
std::string llama3_trace(const ScratchDir& dir, int layers, int prompt, int prefill) {
    SynthParams sp = SynthParams::preset("llama3-8b");
    sp.num_layers = layers, sp.prompt_len = prompt, sp.decode_steps = 3, sp.prefill_queries = prefill;
    const std::string trace = dir.path + "/t.h5";
    synthesize(sp, trace);
    return trace;
}

/// One CPU method `name` per head, built over the prompt (fp16-rounded KV, as the GPU's), each with the seed
/// the GPU run gives its head (`seed(head)`, the runner's method_seed; none: the context's own).
std::vector<std::unique_ptr<Method>> build_cpu_twins(const std::string& name, const json& params,
                                                     const std::vector<HeadSlice>& heads, int prompt,
                                                     const std::function<unsigned(const HeadSlice&)>& seed = nullptr) {
    std::vector<std::unique_ptr<Method>> cpu;
    for (const HeadSlice& h : heads) {
        MethodContext ctx = context_of(h);
        if (seed) ctx.seed = seed(h);
        cpu.push_back(make_method(name, params));
        cpu.back()->build(ctx, KVView{h.keys.data(), h.values.data(), prompt, kD});
    }
    return cpu;
}

/// What a GPU twin's run is held to against its CPU twins at every reported step and head, beyond the
/// lists (always equal) and the outputs (the CPU's attention over the GPU's lists, within fp16 tolerance).
struct TwinChecks {
    bool log_weights = false;  ///< the lists' log weights equal (sampled methods)
    bool accounting = true;    ///< scan_ops, the h2d / d2h bytes and the footprints equal the CPU method's
    bool kv_in_hbm = true;     ///< no KV read over PCIe (head_h2d_bytes 0)
};

/// The tallies of run_beside_cpu_twins.
struct TwinRun {
    int reported = 0;  ///< steps reported
    int same = 0;      ///< (step, head)s whose lists (and weights) equal the CPU method's
    double worst_out = 0, worst_lse = 0;
};

/// Runs `job` (H heads, B replicas) on the CUDA backend beside its CPU twins, telling them each decode step
/// as the runner does, and checks every reported step and head as `checks` says; `each(st, h, got, want)`
/// adds a test's own checks per head, `after(st)` per step.
TwinRun run_beside_cpu_twins(const GpuLayerJob& job, std::vector<std::unique_ptr<Method>>& cpu,
                             const std::vector<HeadSlice>& heads, int prompt, int B, const TwinChecks& checks,
                             const std::function<void(const GpuStep&, int, const Selection&, const Selection&)>& each = nullptr,
                             const std::function<void(const GpuStep&)>& after = nullptr) {
    const int H = (int)heads.size();
    TwinRun r;
    int last = -1;
    gpu_run::make_cuda_backend()->run_layer(job, [&](const GpuStep& st) {
        ++r.reported;
        ASSERT_EQ(st.selections.size(), (size_t)H);
        ASSERT_EQ(st.footprints.size(), (size_t)H);
        append_steps(cpu, heads, prompt, last, st.step);
        last = st.step;
        for (int h = 0; h < H; ++h) {
            const HeadSlice& hs = heads[(size_t)h];
            const Selection& got = st.selections[(size_t)h];
            const Selection want = cpu_select(*cpu[(size_t)h], hs, st);
            EXPECT_EQ(got.exact, want.exact) << "step " << st.step << " head " << h;
            bool same = got.exact == want.exact;
            if (checks.log_weights) {
                EXPECT_EQ(got.exact_log_weight, want.exact_log_weight) << "step " << st.step << " head " << h;
                same = same && got.exact_log_weight == want.exact_log_weight;
            }
            r.same += same;
            if (checks.accounting) {
                EXPECT_EQ(got.scan_ops, want.scan_ops);
                EXPECT_EQ(got.h2d_bytes, want.h2d_bytes);
                EXPECT_EQ(got.d2h_bytes, want.d2h_bytes);
                const Footprint fp = cpu[(size_t)h]->footprint();
                EXPECT_EQ(st.footprints[(size_t)h].gpu_bytes, fp.gpu_bytes);
                EXPECT_EQ(st.footprints[(size_t)h].cpu_bytes, fp.cpu_bytes);
            }
            if (checks.kv_in_hbm) {
                EXPECT_EQ(st.head_h2d_bytes[(size_t)h], 0.0) << "KV over PCIe, head " << h;
            }
            compare_head_outputs(st, hs, h, H, B, got, r.worst_out, r.worst_lse);
            if (each) each(st, h, got, want);
        }
        if (after) after(st);
    });
    return r;
}

/// Every selected step reported, every list the CPU's, the outputs within fp16 tolerance of the CPU's.
void expect_twin_run(const TwinRun& r, const GpuLayerJob& job, int H) {
    EXPECT_EQ(r.reported, (int)job.steps.size());
    EXPECT_EQ(r.same, r.reported * H) << "the GPU run's lists differ from the CPU method's";
    EXPECT_LT(r.worst_out, 5e-3) << "fp16 KV vs float32 (or a row read from the wrong place)";
    EXPECT_LT(r.worst_lse, 5e-3);
}

/// The CPU ranking aggregate of every cluster of `w` for group queries q: [g, d] (sum of softmax).
std::vector<float> cpu_aggregates(const WaveHead& w, const float* q, int g, int d) {
    const WaveIndex& ix = w.index();
    std::vector<float> scores((size_t)g * ix.num_clusters()), agg, tmp;
    for (int j = 0; j < g; ++j)
        attention_scores(q + (size_t)j * d, ix.centroids().data(), ix.num_clusters(), d, 1.0f / std::sqrt((float)d),
                         scores.data() + (size_t)j * ix.num_clusters());
    group_cluster_weights(scores.data(), g, ix.num_clusters(), w.nonempty(), GroupRank::sum, agg, tmp);
    return agg;
}

/// Cluster ids of a selection's retrieval zone (its fetch units) and estimation zone (matched by centroid).
std::pair<std::set<int>, std::set<int>> zones_of(const Selection& s, const WaveIndex& ix) {
    std::set<int> r(s.fetch_units.begin(), s.fetch_units.end()), e;
    for (const auto& c : s.estimated)
        for (int j = 0; j < ix.num_clusters(); ++j)
            if (std::equal(c.centroid, c.centroid + ix.d(), ix.centroid(j))) {
                e.insert(j);
                break;
            }
    return {r, e};
}

/// Largest aggregate gap between a cluster one side puts inside a zone boundary and one the other side
/// puts there instead (0 when the zones agree): a swap is a float tie only if this is tiny.
double swap_gap(const std::set<int>& a, const std::set<int>& b, const std::vector<float>& agg) {
    double gap = 0;
    for (int x : a)
        if (!b.count(x))
            for (int y : b)
                if (!a.count(y)) gap = std::max(gap, (double)std::abs(agg[(size_t)x] - agg[(size_t)y]));
    return gap;
}


}  // namespace

// Wave on the GPU path vs the CPU wave method, step by step: the same exact tokens, estimated clusters,
// fetch units and traffic (a cluster may change zone only in a float tie of its ranking aggregate: fp16
// centroids on the GPU); outputs within fp16 tolerance; replicas identical; the GPU block cache serving
// hits (from its pool: outputs would be wrong otherwise) with exactly the PCIe bytes the system model
// replays for the same selections; an index update in the middle (update_segment 128, window 16).
/// The wave path with the KV in pinned host memory against the CPU method: device_lookup, the execution
/// buffers assembled on the device by the cache's table on the GPU (GpuLayerJob::wave_device_gather, the
/// default), else through the host's lookups and copy lists (the paper's path); async_update: the cache's
/// update of a step applied at the next one (GpuLayerJob::async_update).
void wave_matches_the_cpu_wave_method(bool device_lookup, bool async_update = false) {
    const int H = 2, prompt = 1200, steps = 160, B = 3;
    const auto heads = layer_heads(H, prompt, steps);
    const json params = resolve_params(find_method("wave"), {{"segment", 512}, {"update_segment", 128},
                                                             {"window", 16}, {"retrieval", 0.1}, {"estimation", 0.25}});
    SystemParams sp;
    sp.cache = 0.2;
    const HardwareProfile hw = load_hardware_profile("h100-sxm-pcie5");
    std::vector<std::unique_ptr<Method>> cpu;
    std::vector<WaveHead> mirror;  // the CPU method's index, for the ranking aggregates
    std::vector<std::unique_ptr<HeadSystem>> sys;
    for (const HeadSlice& h : heads) {
        const KVView prompt_kv{h.keys.data(), h.values.data(), prompt, kD};
        cpu.push_back(make_method("wave", params));
        cpu.back()->build(context_of(h), prompt_kv);
        mirror.emplace_back(wave_params_from_json(params), h.layer, h.kv_head);
        mirror.back().build(prompt_kv);
        HeadSystemContext sc;
        sc.method = "wave", sc.params = params, sc.head_dim = kD, sc.group = kG, sc.prompt_len = prompt;
        sc.num_kv_heads = H;
        sys.push_back(std::make_unique<HeadSystem>(sp, hw, sc));
    }
    GpuLayerJob job;
    job.method = "wave";
    for (const HeadSlice& h : heads) job.heads.push_back(&h);
    job.steps = {0, 9, 40, 100, 127, 128, 129, 140, 159};
    job.batch = B;
    job.wave = wave_params_from_json(params);
    job.cache = sys[0]->cache_params();
    job.block_tokens = sys[0]->block_tokens();
    job.wave_device_gather = device_lookup;
    job.async_update = async_update;
    ASSERT_GT(job.cache.capacity_slots, 0);

    int last = -1, reported = 0, steps_with_hits = 0, same = 0, ties = 0, order_ties = 0;
    double worst_out = 0, worst_lse = 0, worst_gap = 0;
    std::vector<std::vector<double>> measured((size_t)H);  // per head: PCIe KV bytes per step
    std::vector<double> scan_ops;
    const auto backend = gpu_run::make_cuda_backend();
    backend->run_layer(job, [&](const GpuStep& st) {
        ++reported;
        ASSERT_EQ(st.selections.size(), (size_t)H);
        for (int t = last + 1; t <= st.step; ++t)
            for (int h = 0; h < H; ++h) {
                const KVView kv{heads[(size_t)h].keys.data(), heads[(size_t)h].values.data(), prompt + t + 1, kD};
                cpu[(size_t)h]->append(kv, prompt + t);
                mirror[(size_t)h].append(kv, prompt + t);
            }
        last = st.step;
        EXPECT_EQ(st.n, prompt + st.step + 1);
        for (int h = 0; h < H; ++h) {
            const HeadSlice& hs = heads[(size_t)h];
            Selection want;
            std::vector<float> q((size_t)kG * kD);
            for (int j = 0; j < kG; ++j) std::copy(hs.query(j, st.step), hs.query(j, st.step) + kD, q.begin() + j * kD);
            cpu[(size_t)h]->select(q.data(), st.step, KVView{hs.keys.data(), hs.values.data(), st.n, kD}, want);
            const Selection& got = st.selections[(size_t)h];
            EXPECT_EQ(got.exact_for(0).size() - want.exact_for(0).size() + want.h2d_bytes, got.h2d_bytes);
            EXPECT_EQ(got.fetch_units.size(), want.fetch_units.size());
            EXPECT_EQ(got.estimated.size(), want.estimated.size());
            EXPECT_EQ(got.d2h_bytes, want.d2h_bytes);
            EXPECT_EQ(got.scan_ops, want.scan_ops);
            if (sorted(got.exact_for(0)) == sorted(want.exact_for(0)) &&
                estimated_of(got, kD) == estimated_of(want, kD)) {
                ++same;
                if (got.fetch_units != want.fetch_units) ++order_ties;  // same set, a near-tie reordered
            } else {
                ++ties;
            }
            // every difference of zone is a swap of clusters with (nearly) equal ranking aggregates
            const std::vector<float> agg = cpu_aggregates(mirror[(size_t)h], q.data(), kG, kD);
            const auto [gr, ge] = zones_of(got, mirror[(size_t)h].index());
            const auto [wr, we] = zones_of(want, mirror[(size_t)h].index());
            EXPECT_EQ(ge.size(), got.estimated.size());
            std::set<int> gu = gr, wu = wr;
            gu.insert(ge.begin(), ge.end()), wu.insert(we.begin(), we.end());
            worst_gap = std::max({worst_gap, swap_gap(gr, wr, agg), swap_gap(gu, wu, agg)});
            for (size_t i = 1; i < got.fetch_units.size(); ++i)  // rank order, up to ties
                worst_gap = std::max(worst_gap, (double)agg[(size_t)got.fetch_units[i]] -
                                                    agg[(size_t)got.fetch_units[i - 1]]);
            if (h == 0) scan_ops.push_back(got.scan_ops);
            compare_head_outputs(st, hs, h, H, B, got, worst_out, worst_lse);  // the GPU's own selection
            sys[(size_t)h]->record(got, st.n, st.footprints[(size_t)h]);
            measured[(size_t)h].push_back(st.head_h2d_bytes[(size_t)h]);
            if (st.head_h2d_bytes[(size_t)h] < got.h2d_bytes) ++steps_with_hits;
        }
        // the work and the batch totals are consistent with the per-head numbers
        double h2d = 0;
        for (double x : st.head_h2d_bytes) h2d += x;
        EXPECT_DOUBLE_EQ(st.work.h2d_bytes, h2d);
        EXPECT_DOUBLE_EQ(st.batch_h2d_bytes, B * h2d);  // replicas alike
        EXPECT_GT(st.work.index_bytes, 0);
        EXPECT_GT(st.work.attend_bytes, 0);
    });
    EXPECT_EQ(reported, (int)job.steps.size());
    EXPECT_LT(worst_gap, 1e-3) << "a cluster changed zone without a tie in its ranking aggregate";
    EXPECT_GE(same, (int)(0.8 * reported * H)) << "selections differ from the CPU method's too often";
    EXPECT_LT(worst_out, 5e-3) << "fp16 KV, centroids and value sums vs float32";
    EXPECT_LT(worst_lse, 5e-3);
    EXPECT_GT(scan_ops.back(), scan_ops.front()) << "the index grew at step 128";
    EXPECT_GT(steps_with_hits, 0) << "the GPU cache served no hit: the pool path was not exercised";
    for (int h = 0; h < H; ++h) {
        std::map<std::string, std::vector<double>> kv;
        sys[(size_t)h]->finish(kv);
        EXPECT_EQ(measured[(size_t)h], kv["h2d_bytes"]) << "measured PCIe bytes vs the system model's replay, head " << h;
    }
    std::printf("wave GPU path (%s) vs CPU wave: %d of %d head-steps identical (%d reordered by a near-tie), %d with a "
                "tie swap (largest aggregate gap %.1e); worst output rel L2 %.2e, LSE %.2e; %d head-steps with "
                "cache hits\n",
                device_lookup ? (async_update ? "device lookups, async update" : "device lookups") : "host lookups", same, reported * H, order_ties, ties, worst_gap,
                worst_out, worst_lse, steps_with_hits);
}

BACKEND_TEST(WaveMatchesTheCpuWaveMethod) {
    REQUIRE_DEVICE();
    wave_matches_the_cpu_wave_method(false);
}

// The device lookup path (issue 40 #2): the same selections, outputs and PCIe bytes as the system model's
// replay, the cache's hits served from the pool by the table on the GPU.
BACKEND_TEST(WaveWithDeviceLookupsMatchesTheCpuWaveMethod) {
    REQUIRE_DEVICE();
    wave_matches_the_cpu_wave_method(true);
}

// The update applied at the next step (RetroInfer's asynchronous cache update): the same hits and misses,
// so the same PCIe bytes as the model's replay, across the index update at step 128 (flushed before it).
BACKEND_TEST(WaveWithAsyncUpdateMatchesTheCpuWaveMethod) {
    REQUIRE_DEVICE();
    wave_matches_the_cpu_wave_method(true, true);
}

// Quest on the GPU (issue 41 #3) against the CPU method `quest` on the same fp16 keys: the same pages for
// every query head (or KV head, gqa "max") at every selected step — the bounds agree bit for bit, so
// the lists are equal, not merely close —, through page boundaries, steps skipped between selected
// ones (the metadata catches up), a budget under and one over the visible pages (dense); outputs of the
// GPU's attention over its pages within fp16 tolerance of the CPU's over the same ids; replicas alike; the
// same accounting (scan_ops, the zero PCIe bytes, footprints).
BACKEND_TEST(QuestMatchesTheCpuQuestMethod) {
    REQUIRE_DEVICE();
    const int H = 2, prompt = 1000, steps = 40, B = 2;
    auto heads = layer_heads(H, prompt, steps);
    round_kv_to_half(heads);
    struct Case { std::string gqa; double k; };
    for (const Case& c : {Case{"per_head", 160}, Case{"max", 200}, Case{"per_head", 0.05}, Case{"max", 4096}}) {
        SCOPED_TRACE(c.gqa + " k=" + std::to_string(c.k));
        const json params = resolve_params(find_method("quest"), {{"k", c.k}, {"gqa", c.gqa}, {"placement", "gpu"}});
        MethodRun mr;
        mr.method = "quest", mr.params = params, mr.batch = B;
        GpuLayerJob job = gpu_job_for(mr, CudaOptions{}, "test");
        for (const HeadSlice& h : heads) job.heads.push_back(&h);
        job.steps = {0, 5, 7, 23, 24, 39};  // n = 1001 .. 1040: pages completed at 1008, 1024, 1040
        auto cpu = build_cpu_twins("quest", params, heads, prompt);
        // the accounting (scan, the zero PCIe bytes, footprints) the CPU method's
        const TwinRun r = run_beside_cpu_twins(
            job, cpu, heads, prompt, B, {},
            [&](const GpuStep&, int, const Selection& got, const Selection& want) {
                EXPECT_EQ(got.h2d_bytes, 0.0);  // the KV in HBM (placement gpu): nothing over PCIe
                EXPECT_EQ(want.h2d_bytes, 0.0);
            },
            [&](const GpuStep& st) {
                EXPECT_EQ(st.batch_h2d_bytes, 0.0);
                EXPECT_GT(st.work.attend_bytes, 0);
                const bool dense = c.k >= 4096;
                EXPECT_EQ(st.work.index_bytes > 0, !dense) << "the bounds are read only when the pages exceed the budget";
                if (dense) {
                    EXPECT_EQ(st.selections[0].exact_for(0).size(), (size_t)st.n);
                }
            });
        expect_twin_run(r, job, H);
    }
}

// PQCache on the GPU (issue 41 #3) against the CPU method `pq` on the same fp16 keys, built with the same
// seed: the same tokens in the same order for every KV head (or query head, per_head) at every selected
// step — the tables and scores agree bit for bit, so the lists are equal, not merely close —, with the
// tokens leaving the window encoded between selected steps, the ranking by max, mean and per head, a
// budget beyond the coded tokens, and a prompt too short to code whose codebooks are fit at the first
// eviction; the same accounting (fetch order, scan_ops, the offloaded model's h2d/d2h bytes, footprints);
// outputs of the GPU's attention over its lists within fp16 tolerance of the CPU's over the same ids;
// replicas alike; no KV over PCIe (the KV in device memory, cuda.wave_kv "gpu").
BACKEND_TEST(PqMatchesTheCpuPqMethod) {
    REQUIRE_DEVICE();
    const int H = 2, prompt = 1000, steps = 40, B = 2;
    auto heads = layer_heads(H, prompt, steps);
    round_kv_to_half(heads);  // the cuda backend runs fp16 KV (check_cuda_trace): the CPU twin sees the same values
    const json cases[] = {{{"k", 40}},
                          {{"k", 0.05}, {"gqa", "per_head"}, {"m", 4}, {"nbits", 5}},
                          {{"k", 100}, {"gqa", "mean"}, {"sink", 0}, {"window", 16}},
                          {{"k", 2000}, {"gqa", "per_head"}},
                          {{"k", 10}, {"window", 1020}}};  // nothing coded at build: fit at n = 1025
    for (const json& given : cases) {
        SCOPED_TRACE(given.dump());
        const json params = resolve_params(find_method("pq"), given);
        MethodRun mr;
        mr.method = "pq", mr.params = params, mr.batch = B, mr.kv = "gpu";  // the KV in device memory
        GpuLayerJob job = gpu_job_for(mr, CudaOptions{}, "test");
        ASSERT_TRUE(job.kv_on_gpu);
        for (const HeadSlice& h : heads) job.heads.push_back(&h);
        job.steps = {0, 5, 7, 23, 24, 39};
        auto cpu = build_cpu_twins("pq", params, heads, prompt,
                                   [&](const HeadSlice& h) { return job.pq.seed(h.layer, h.kv_head); });
        const TwinRun r = run_beside_cpu_twins(
            job, cpu, heads, prompt, B, {},
            [](const GpuStep&, int, const Selection& got, const Selection& want) {
                EXPECT_EQ(got.fetch_tokens, want.fetch_tokens);
            },
            [](const GpuStep& st) {
                EXPECT_GT(st.work.attend_bytes, 0);
                EXPECT_GT(st.index_build_ms, 0);
            });
        expect_twin_run(r, job, H);
    }
}

// PQCache with its KV offloaded (the default placement; issue 41 #3): the KV in pinned host memory, the static
// tokens on the device, the chosen tokens read through the GPU block cache of token_block-position units
// (hits from the pool, misses zero-copy from host memory), the cache's update after each step. The lists
// equal the CPU method's as in the device-memory case; the outputs over the gathered rows are within fp16
// tolerance of the CPU's (a row read from a wrong place — a stale pool block, a wrong unit — moves them far
// more); the KV bytes read from host memory per head equal the system model's replay of the same selections
// through the same cache (its h2d_bytes less the codes, which the GPU holds), with hits served; with one
// list per KV head (max) exactly, and per_head (each list gathers its own rows) at least the model's; without
// a cache every retrieved token is read over PCIe; units of whole cache blocks (64 tokens), a token-level cache
// (token_block 1) and units of another size (24) alike; with the update applied at the next step while the GPU
// selects (async_update: PQCache's asynchronous update) the same bytes, since the next gather sees it either way.
BACKEND_TEST(PqOffloadedMatchesTheCpuPqMethodAndTheSystemModel) {
    REQUIRE_DEVICE();
    const int H = 2, prompt = 1000, steps = 40, B = 2;
    auto heads = layer_heads(H, prompt, steps);
    round_kv_to_half(heads);
    const HardwareProfile hw = load_hardware_profile("h100-sxm-pcie5");
    struct Case {
        json params;
        double cache;
        int token_block;  // d 64: 16-token blocks; 64 = 4 blocks a unit, 1 and 24 a pool block of their own
        bool async = false;  // the update applied at the next step while the GPU selects (cuda.async_update)
    };
    const Case cases[] = {{{{"k", 60}}, 0.25, 64},
                          {{{"k", 60}}, 0.25, 64, true},
                          {{{"k", 0.05}, {"gqa", "per_head"}}, 0.25, 64},
                          {{{"k", 40}, {"gqa", "mean"}}, 0.03, 1},
                          {{{"k", 40}}, 0.25, 24},
                          {{{"k", 40}}, 0.0, 64}};
    for (const Case& c : cases) {
        SCOPED_TRACE(c.params.dump() + " cache " + std::to_string(c.cache) + " token_block " + std::to_string(c.token_block) +
                     (c.async ? " async" : ""));
        const json params = resolve_params(find_method("pq"), c.params);
        SystemParams sp;
        sp.cache = c.cache, sp.token_block = c.token_block, sp.miss_moves = "needed";
        MethodRun mr;
        mr.method = "pq", mr.params = params, mr.batch = B, mr.system = sp.to_json();  // kv "": host memory
        CudaOptions o;
        o.async_update = c.async;
        GpuLayerJob job = gpu_job_for(mr, o, "test");
        ASSERT_FALSE(job.kv_on_gpu);
        EXPECT_EQ(job.async_update, c.async);
        set_job_cache(mr, kD, prompt, job, "test");
        EXPECT_EQ(job.unit_tokens, c.token_block);
        EXPECT_EQ(job.cache.capacity_slots > 0, c.cache > 0);
        for (const HeadSlice& h : heads) job.heads.push_back(&h);
        job.steps = {0, 1, 2, 3, 5, 8, 13, 21, 34, 39};
        auto cpu = build_cpu_twins("pq", params, heads, prompt,
                                   [&](const HeadSlice& h) { return job.pq.seed(h.layer, h.kv_head); });
        std::vector<std::unique_ptr<HeadSystem>> sys;
        for (size_t h = 0; h < heads.size(); ++h) {
            HeadSystemContext sc;
            sc.method = "pq", sc.params = params, sc.head_dim = kD, sc.group = kG, sc.prompt_len = prompt;
            sc.num_kv_heads = H;
            sys.push_back(std::make_unique<HeadSystem>(sp, hw, sc));
        }
        const bool per_head = params.at("gqa") == "per_head";
        int steps_with_hits = 0;
        double h2d = 0;  // this step's KV bytes read from host memory, over the heads
        std::vector<std::vector<double>> measured((size_t)H), codes((size_t)H);
        const TwinRun r = run_beside_cpu_twins(
            job, cpu, heads, prompt, B, {.accounting = false, .kv_in_hbm = false},
            [&](const GpuStep& st, int h, const Selection& got, const Selection& want) {
                EXPECT_EQ(got.fetch_tokens, want.fetch_tokens);
                sys[(size_t)h]->record(got, st.n, st.footprints[(size_t)h]);
                const double tok = 2.0 * kD * 2;
                measured[(size_t)h].push_back(st.head_h2d_bytes[(size_t)h]);
                codes[(size_t)h].push_back(got.h2d_bytes - (double)got.fetch_tokens.size() * tok);
                if (st.head_h2d_bytes[(size_t)h] < (double)got.fetch_tokens.size() * tok) ++steps_with_hits;
                if (c.cache == 0 && !per_head) {
                    EXPECT_EQ(st.head_h2d_bytes[(size_t)h], (double)got.fetch_tokens.size() * tok) << "no cache: all over PCIe";
                }
                h2d += st.head_h2d_bytes[(size_t)h];
            },
            [&](const GpuStep& st) {
                EXPECT_DOUBLE_EQ(st.work.h2d_bytes, h2d);
                EXPECT_GE(st.batch_h2d_bytes, B * h2d) << "every replica's misses (and the cache's fills) counted";
                if (c.cache > 0) {
                    EXPECT_GT(st.batch_d2h_bytes, 0) << "the lists read back for the cache's update";
                }
                h2d = 0;
            });
        expect_twin_run(r, job, H);
        if (c.cache > 0) {
            EXPECT_GT(steps_with_hits, 0) << "the GPU cache served no hit: the pool path was not exercised";
        } else {
            EXPECT_EQ(steps_with_hits, 0);
        }
        for (int h = 0; h < H; ++h) {
            std::map<std::string, std::vector<double>> kv;
            sys[(size_t)h]->finish(kv);
            ASSERT_EQ(kv["h2d_bytes"].size(), measured[(size_t)h].size());
            for (size_t i = 0; i < measured[(size_t)h].size(); ++i) {
                const double model = kv["h2d_bytes"][i] - codes[(size_t)h][i];  // the model's KV misses
                if (per_head) {
                    EXPECT_GE(measured[(size_t)h][i], model - 1e-6) << "step " << i << " head " << h;
                } else {
                    EXPECT_NEAR(measured[(size_t)h][i], model, 1e-6) << "measured vs the model's replay, step " << i << " head " << h;
                }
            }
        }
        std::printf("pq offloaded (%s, cache %.2f, token_block %d%s): %d head-steps with cache hits of %d\n",
                    params.at("gqa").get<std::string>().c_str(), c.cache, c.token_block, c.async ? ", async" : "",
                    steps_with_hits, r.reported * H);
    }
}

// MagicPIG on the GPU and the host (issue 41 #3) against the CPU method `magicpig` on the same fp16 keys, built
// with the same seed: at every selected step every query head's list (the static tokens, then the sampled ones
// in id order) and its log weights equal the CPU method's — the GPU's query codes are the CPU's bit for bit and
// the host runs the method's own collision test and weights —, at the defaults, CTKVR's (9, 120) and (8, 75)
// with another seed and layout, three collisions, K = 0 (every token sampled with weight 1: exact attention)
// and a prompt with nothing offloaded; the same accounting (scan_ops, d2h/h2d bytes, footprints); the merged
// outputs (GPU static attention + host sampled attention) within fp16 tolerance of the CPU's over the same
// lists and weights; replicas alike; no KV over PCIe.
BACKEND_TEST(MagicpigMatchesTheCpuMagicpigMethod) {
    REQUIRE_DEVICE();
    const int H = 2, prompt = 1000, steps = 40, B = 2;
    // keys spread around their clusters, so that a sampled token's probability is well below 1 and its
    // weight moves the output (the outputs' comparison then checks the weights; weight_effect below)
    auto heads = layer_heads(H, prompt, steps, true);
    round_kv_to_half(heads);
    const json cases[] = {json::object(),
                          {{"K", 9}, {"L", 120}, {"seed", 7}, {"sink", 0}, {"window", 16}},
                          {{"K", 8}, {"L", 75}, {"min_collisions", 3}},
                          {{"K", 0}, {"L", 4}},
                          {{"window", 1000}}};  // nothing offloaded: static tokens only
    for (const json& given : cases) {
        SCOPED_TRACE(given.dump());
        const json params = resolve_params(find_method("magicpig"), given);
        MethodRun mr;
        mr.method = "magicpig", mr.params = params, mr.batch = B;
        GpuLayerJob job = gpu_job_for(mr, CudaOptions{}, "test");
        for (const HeadSlice& h : heads) job.heads.push_back(&h);
        job.steps = {0, 5, 7, 23, 24, 39};
        job.host_threads = 2;
        auto cpu = build_cpu_twins("magicpig", params, heads, prompt,
                                   [&](const HeadSlice& h) { return job.magicpig.seed(h.layer, h.kv_head); });
        const int ib = std::min(params["sink"].get<int>(), prompt);
        const int ie = std::max(ib, prompt - params["window"].get<int>());
        size_t sampled = 0;
        double weight_effect = 0;
        // the sampled KV attended on the host: none over PCIe (kv_in_hbm's check)
        const TwinRun r = run_beside_cpu_twins(
            job, cpu, heads, prompt, B, {.log_weights = true},
            [&](const GpuStep& st, int h, const Selection& got, const Selection&) {
                for (const auto& l : got.exact) sampled += l.size() - (size_t)(ib + st.n - ie);  // beyond the static
                Selection unweighted = got;
                unweighted.exact_log_weight.clear();
                for (int j = 0; j < kG; ++j) {
                    float a[kD], u[kD];
                    cpu_output(heads[(size_t)h], j, st.step, got, a);
                    cpu_output(heads[(size_t)h], j, st.step, unweighted, u);
                    weight_effect = std::max(weight_effect, rel_l2(u, a, kD));
                }
            },
            [](const GpuStep& st) {
                EXPECT_GT(st.work.attend_bytes, 0);
                EXPECT_GT(st.batch_d2h_bytes, 0);
                EXPECT_GE(st.times.step_us, st.times.host_us);
            });
        expect_twin_run(r, job, H);
        if (params["window"].get<int>() < prompt) {
            EXPECT_GT(sampled, 0u) << "nothing sampled: the host part untested";
        } else {
            EXPECT_EQ(sampled, 0u);
        }
        if (params["K"].get<int>() > 0 && sampled > 0) {  // the weights matter here: wrong ones would show
            EXPECT_GT(weight_effect, 0.05);
        }
    }
}

// The CPU-index methods on the GPU footing (host_index_layer.cpp): every list of every selected step equal
// to the CPU method's (its own search, run on the host per (replica, KV head) from queries read back from
// the GPU), the accounting and footprints its own, and the split's output — the static pattern attended on
// the GPU, the retrieved tokens on the host, merged by LSE — the CPU's attention over the same list.
BACKEND_TEST(HostIndexMatchesTheCpuMethod) {
    REQUIRE_DEVICE();
    const int H = 2, prompt = 1000, steps = 40, B = 2;
    auto heads = layer_heads(H, prompt, steps, true, 200);
    round_kv_to_half(heads);
    const std::pair<std::string, json> cases[] = {
        {"faiss_flat", {{"k", 40}, {"sink", 16}, {"window", 64}, {"placement", "cpu_attention"}}},
        // tokens leaving the window move to the index: the GPU's part slides
        {"faiss_flat", {{"k", 30}, {"sink", 4}, {"window", 8}, {"gqa", "union"}, {"placement", "cpu_attention"}}},
        {"faiss_ivf", {{"k", 0.05}, {"nlist", 16}, {"nprobe", 4}, {"placement", "cpu_attention"},
                       {"decode_tokens", "static"}}},
        {"faiss_hnsw", {{"k", 25}, {"sink", 0}, {"window", 32}, {"placement", "cpu_attention"}}},
        {"retrieval_attention", {{"k", 30}, {"sink", 8}, {"window", 32}, {"nq", 20}}},
        {"retrieval_attention", {{"window", 1000}}}};  // nothing indexed: the GPU's part alone
    for (const auto& [name, given] : cases) {
        SCOPED_TRACE(name + " " + given.dump());
        const json params = resolve_params(find_method(name), given);
        MethodRun mr;
        mr.method = name, mr.params = params, mr.batch = B;
        GpuLayerJob job = gpu_job_for(mr, CudaOptions{}, "test");
        for (const HeadSlice& h : heads) job.heads.push_back(&h);
        job.steps = {0, 5, 7, 23, 24, 39};
        job.host_threads = 2;
        auto cpu = build_cpu_twins(name, params, heads, prompt,
                                   [&](const HeadSlice& h) { return job.host_index.seed(h.layer, h.kv_head); });
        const int ib = std::min(params["sink"].get<int>(), prompt);
        const int ie = std::max(ib, prompt - params["window"].get<int>());
        size_t retrieved = 0;
        // the retrieved KV attended on the host: none over PCIe (kv_in_hbm's check)
        const TwinRun r = run_beside_cpu_twins(
            job, cpu, heads, prompt, B, {},
            [&](const GpuStep&, int, const Selection& got, const Selection&) {
                for (const auto& l : got.exact)
                    for (int32_t id : l) retrieved += id >= ib && id < ie;  // from the index (prompt tokens)
            },
            [&](const GpuStep& st) {
                EXPECT_GT(st.work.attend_bytes, 0);
                EXPECT_EQ(st.batch_d2h_bytes, (double)B * H * kG * (2 * kD + 1) * sizeof(float));  // queries + partials
                EXPECT_GE(st.times.step_us, st.times.host_us);
                EXPECT_EQ(st.times.select_us, 0.0);
            });
        expect_twin_run(r, job, H);
        if (ie > ib) {
            EXPECT_GT(retrieved, 0u) << "nothing retrieved: the host part untested";
        } else {
            EXPECT_EQ(retrieved, 0u);
        }
    }
    // FAISS's gpu_fetch placement is not built on the GPU: refused by name before any work
    MethodRun gf;
    gf.method = "faiss_ivf";
    gf.params = resolve_params(find_method("faiss_ivf"), json::object());
    try {
        gpu_job_for(gf, CudaOptions{}, "run faiss_ivf");
        FAIL() << "faiss_ivf with placement gpu_fetch was accepted on the GPU";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("set \"placement\": \"cpu_attention\""), std::string::npos) << e.what();
    }
}

// Batches of distinct sequences (issue 40 #1: GpuLayerJob::more_heads): in a batch of 4 over two sequences
// (replicas 0 and 2 run sequence A, 1 and 3 sequence B), replica 1 gives what sequence B's run alone gives at
// batch 1 and replica 3 the same, while A's and B's replicas differ — for full attention, wave (its KV in host
// memory through the cache, and in device memory), Quest, PQCache (offloaded and in HBM), MagicPIG (each
// sequence's hash tables and hyperplanes, its host-side sampling over its own KV) and the CPU-index methods
// (FAISS IVF, RetrievalAttention: each sequence's index built over its prompt, the further replicas' copies of
// their sequence's); shared builds over both sequences serve either.
BACKEND_TEST(DistinctSequencesRunAsTheyDoAlone) {
    REQUIRE_DEVICE();
    const int H = 2, prompt = 1200, steps = 12;
    // prefill queries: RetrievalAttention trains its graph on them
    auto A = layer_heads(H, prompt, steps, false, 200), Bq = layer_heads(H, prompt, steps, true, 200);
    round_kv_to_half(A), round_kv_to_half(Bq);
    for (HeadSlice& h : Bq) h.layer = 1;  // another layer's seeds (MagicPIG's hyperplanes, the indexes' k-means)
    SystemParams sp;
    sp.cache = 0.2, sp.token_block = 64;
    struct Case {
        const char* method;
        json params;
        std::string kv;  // "" host, "gpu"
    };
    const Case cases[] = {{"full", json::object(), ""},
                          {"wave", {{"segment", 512}, {"update_segment", 128}, {"window", 16}, {"retrieval", 0.1},
                                    {"estimation", 0.25}}, ""},
                          {"wave", {{"retrieval", 0.1}, {"estimation", 0.25}}, "gpu"},
                          {"quest", {{"k", 256}, {"placement", "gpu"}}, ""},
                          {"pq", {{"k", 60}}, ""},
                          {"pq", {{"k", 60}, {"gqa", "per_head"}}, "gpu"},
                          {"magicpig", {{"K", 8}, {"L", 60}}, ""},
                          {"faiss_ivf", {{"k", 0.05}, {"nlist", 16}, {"nprobe", 4}, {"placement", "cpu_attention"}}, ""},
                          {"retrieval_attention", {{"k", 30}, {"sink", 8}, {"window", 32}, {"nq", 20}}, ""}};
    const auto backend = gpu_run::make_cuda_backend();
    for (const Case& c : cases) {
        SCOPED_TRACE(std::string(c.method) + " " + c.params.dump() + " kv " + c.kv);
        MethodRun mr;
        mr.method = c.method, mr.params = resolve_params(find_method(c.method), c.params), mr.kv = c.kv;
        mr.system = sp.to_json();
        const auto job_of = [&](const std::vector<HeadSlice>& first, const std::vector<HeadSlice>* more, int batch) {
            mr.batch = batch;
            GpuLayerJob job = gpu_job_for(mr, CudaOptions{}, "test");
            set_job_cache(mr, kD, prompt, job, "test");
            for (const HeadSlice& h : first) job.heads.push_back(&h);
            if (more)
                for (const HeadSlice& h : *more) job.more_heads.push_back(&h);
            job.steps = {0, 3, 4, 11};
            return job;
        };
        const auto run = [&](const GpuLayerJob& job) {
            std::vector<std::vector<float>> outs;
            backend->run_layer(job, [&](const GpuStep& st) {
                outs.emplace_back(st.out, st.out + (size_t)job.batch * H * kG * kD);
            });
            return outs;
        };
        const GpuLayerJob mixed = job_of(A, &Bq, 4);
        const auto both = run(mixed), alone = run(job_of(Bq, nullptr, 1));
        BuiltIndex built;  // a shared build over both sequences (the runner's) serves the mixed batch too
        if (find_gpu_method(c.method)->shared_build) {
            built = backend->build_index(mixed);
            GpuLayerJob shared = mixed;
            shared.built = &built;
            EXPECT_EQ(run(shared), both) << "the shared build differs from the run's own";
        }
        const size_t per = (size_t)H * kG * kD;
        ASSERT_EQ(both.size(), alone.size());
        for (size_t i = 0; i < both.size(); ++i) {
            EXPECT_LT(rel_l2(both[i].data() + per, alone[i].data(), (int)per), 1e-5) << "step " << i << ": replica 1 vs B alone";
            EXPECT_LT(rel_l2(both[i].data() + 3 * per, both[i].data() + per, (int)per), 1e-6) << "step " << i;
            EXPECT_LT(rel_l2(both[i].data() + 2 * per, both[i].data(), (int)per), 1e-6) << "step " << i;
            EXPECT_GT(rel_l2(both[i].data() + per, both[i].data(), (int)per), 1e-2) << "step " << i << ": A and B alike";
        }
    }
}

// cuda::StepGraph (issue 40 #6): the first run with a key captures the body, later runs with that key replay
// it (the body not called again on a GPU), a new key captures again; the replay reads device memory and
// pinned host memory as they are then (a copy from a pinned buffer rewritten between replays moves the new
// values). In the emulation a replay whose launches' arguments differ from the capture's is refused by name,
// and so are an event or a wait inside the body: what a GPU would silently get wrong, or refuse.
BACKEND_TEST(StepGraphReplaysWhatItCaptured) {
    REQUIRE_DEVICE();
    cuda::Stream stream;
    cuda::PinnedBuffer<int32_t> h(4), back(4);
    cuda::DeviceBuffer<int32_t> d(4);
    cuda::StepGraph graph("test graph");
    size_t bytes = 4 * sizeof(int32_t);
    int calls = 0;
    const auto body = [&] {
        ++calls;
        cuda::copy_h2d_async(d.get(), h.get(), bytes, stream.get());
    };
    for (int round = 0; round < 3; ++round) {
        for (int i = 0; i < 4; ++i) h[(size_t)i] = 10 * round + i;
        graph.run(7, stream.get(), body);
        cuda::copy_d2h_async(back.get(), d.get(), 4 * sizeof(int32_t), stream.get());
        stream.synchronize();
        for (int i = 0; i < 4; ++i) EXPECT_EQ(back[(size_t)i], 10 * round + i) << "round " << round;
        EXPECT_EQ(graph.captures(), 1);
        if (round > 0) {
            EXPECT_EQ(graph.last_capture_us(), 0.0) << "a replay has no capture time";
        }
    }
    graph.run(8, stream.get(), body);  // another key: captured again
    stream.synchronize();
    EXPECT_EQ(graph.captures(), 2);
#ifdef RETRO_GPU_EMULATION
    EXPECT_EQ(calls, 4);  // the emulation runs the body every time (a GPU: at the captures only)
    bytes = 2 * sizeof(int32_t);  // the same key, another argument: what a graph would not see
    try {
        graph.run(8, stream.get(), body);
        ADD_FAILURE() << "a replay with other arguments than its capture's was taken";
    } catch (const cuda::StepGraphError& e) {
        EXPECT_NE(std::string(e.what()).find("copy_h2d_async"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("test graph"), std::string::npos) << e.what();
    }
    cuda::Event ev;
    cuda::StepGraph timed("timed graph");
    EXPECT_THROW(timed.run(1, stream.get(), [&] { ev.record(stream.get()); }), cuda::StepGraphError);
    EXPECT_THROW(timed.run(2, stream.get(), [&] { stream.synchronize(); }), cuda::StepGraphError);
#else
    EXPECT_EQ(calls, 2);
#endif
}

// cuda.step_graph on the run path: full attention (FlashInfer planned on the device inside the graph, cuDNN,
// the own kernel) and wave on its device path (KV in device memory; KV in host memory through the GPU block
// cache's table) give the steps they give without the graph, over steps that cross the index's growth: wave
// captures again after each growth (graph_us > 0) and replays in between (graph_us 0) — in the emulation
// every replay's launches are checked against the capture's, so a key that misses what a growth changes
// fails here. The phases inside a graph are not timed. Refused: a method without a graph, wave's host
// lookups and its asynchronous update.
BACKEND_TEST(StepGraphGivesTheSameSteps) {
    REQUIRE_DEVICE();
    const int H = 2, prompt = 1200, steps = 150;
    auto heads = layer_heads(H, prompt, steps);
    round_kv_to_half(heads);
    SystemParams sp;
    sp.cache = 0.2, sp.token_block = 64;
    const json wave_params = {{"segment", 512}, {"update_segment", 64}, {"window", 16}, {"retrieval", 0.1},
                              {"estimation", 0.25}};
    struct Case {
        const char* method;
        json params;
        std::string kv, kernel;
    };
    const Case cases[] = {{"full", json::object(), "", "flashinfer"},
                          {"full", json::object(), "", "own"},
                          {"full", json::object(), "", "cudnn"},
                          {"wave", wave_params, "gpu", ""},
                          {"wave", wave_params, "", ""}};
    const auto backend = gpu_run::make_cuda_backend();
    for (const Case& c : cases) {
        SCOPED_TRACE(std::string(c.method) + " kv " + c.kv + " kernel " + c.kernel);
        if (c.kernel == "cudnn" && !cuda::cudnn_decode_unsupported(kD, kG).empty()) continue;  // no cuDNN here
        MethodRun mr;
        mr.method = c.method, mr.params = resolve_params(find_method(c.method), c.params), mr.kv = c.kv;
        mr.kernel = c.kernel, mr.batch = 2, mr.system = sp.to_json();
        const auto run = [&](bool graphed) {
            CudaOptions o;
            o.step_graph = graphed;
            GpuLayerJob job = gpu_job_for(mr, o, "test");
            set_job_cache(mr, kD, prompt, job, "test");
            for (const HeadSlice& h : heads) job.heads.push_back(&h);
            job.steps = {0, 1, 2, 3, 70, 71, 72, 140, 141, 149};
            std::vector<std::vector<float>> outs;
            std::vector<GpuStepTimes> times;
            backend->run_layer(job, [&](const GpuStep& st) {
                outs.emplace_back(st.out, st.out + (size_t)job.batch * H * kG * kD);
                times.push_back(st.times);
            });
            return std::make_pair(outs, times);
        };
        const auto [plain, plain_t] = run(false);
        const auto [graphed, graph_t] = run(true);
        ASSERT_EQ(plain.size(), graphed.size());
        int captures = 0;
        for (size_t i = 0; i < plain.size(); ++i) {
            EXPECT_LT(rel_l2(graphed[i].data(), plain[i].data(), (int)plain[i].size()), 1e-5) << "step " << i;
            captures += graph_t[i].graph_us > 0;
            EXPECT_EQ(plain_t[i].graph_us, 0.0);
            EXPECT_EQ(graph_t[i].select_us + graph_t[i].gather_us, 0.0) << "a graph's phases are not timed";
            EXPECT_EQ(graph_t[i].attend_us, graph_t[i].step_us);
        }
        EXPECT_GT(graph_t[0].graph_us, 0.0) << "the first step captures";
        if (std::string(c.method) == "full") EXPECT_EQ(captures, 1);
        else EXPECT_GE(captures, 3) << "the index grew twice: captured again each time";
        EXPECT_LE(captures, (int)plain.size() - 5) << "replays between the growths";
    }
    MethodRun q;
    q.method = "quest", q.params = resolve_params(find_method("quest"), {{"placement", "gpu"}});
    CudaOptions o;
    o.step_graph = true;
    EXPECT_THROW(check_cuda_run(q, o, "t"), ConfigError);
    MethodRun w;
    w.method = "wave", w.params = resolve_params(find_method("wave"), json::object());
    o.async_update = true;
    EXPECT_THROW(gpu_job_for(w, o, "t"), ConfigError);
    o.async_update = false, o.device_gather = false;
    EXPECT_THROW(gpu_job_for(w, o, "t"), ConfigError);
}

// pq's heads built once for the layer (build_index: the quantizers and the prompt's codes, as the runner and the
// driver share them across batch points and placements) give the same steps as a run that builds its own,
// offloaded and in device memory alike: the same lists and outputs; the shared heads are copied, not
// changed, by a run (a second run gives the same again, past the decode tokens the first one appended).
BACKEND_TEST(PrebuiltPqHeadsGiveTheSameSteps) {
    REQUIRE_DEVICE();
    const int H = 2, prompt = 900, steps = 30;
    auto heads = layer_heads(H, prompt, steps);
    round_kv_to_half(heads);
    MethodRun mr;
    mr.method = "pq", mr.params = resolve_params(find_method("pq"), {{"k", 50}, {"window", 16}}), mr.batch = 2;
    SystemParams sp;
    sp.cache = 0.2, sp.token_block = 64;
    mr.system = sp.to_json();
    GpuLayerJob job = gpu_job_for(mr, CudaOptions{}, "test");
    set_job_cache(mr, kD, prompt, job, "test");
    for (const HeadSlice& h : heads) job.heads.push_back(&h);
    job.steps = {0, 7, 20, 29};  // tokens leave the window between them: codes appended to the copies
    const auto run = [&](const GpuLayerJob& j) {
        std::vector<std::pair<std::vector<float>, std::vector<std::vector<int32_t>>>> seen;
        gpu_run::make_cuda_backend()->run_layer(j, [&](const GpuStep& st) {
            std::vector<std::vector<int32_t>> ids;
            for (const Selection& sel : st.selections) ids.emplace_back(sel.exact_for(0).begin(), sel.exact_for(0).end());
            seen.emplace_back(std::vector<float>(st.out, st.out + (size_t)j.batch * H * kG * kD), ids);
        });
        return seen;
    };
    const auto own = run(job);
    const auto backend = gpu_run::make_cuda_backend();
    const BuiltIndex built = backend->build_index(job);
    ASSERT_EQ(built.pq.size(), (size_t)H);
    EXPECT_TRUE(built.wave.empty());
    const size_t codes0 = built.pq[0].codes().size();
    job.built = &built;
    const auto shared = run(job), again = run(job);
    EXPECT_EQ(built.pq[0].codes().size(), codes0) << "a run changed the shared heads";
    GpuLayerJob in_hbm = job;
    in_hbm.kv_on_gpu = true;
    const auto hbm = run(in_hbm);
    ASSERT_EQ(own.size(), job.steps.size());
    for (const auto* other : {&shared, &again, &hbm}) {
        ASSERT_EQ(other->size(), own.size());
        for (size_t i = 0; i < own.size(); ++i) {
            EXPECT_EQ((*other)[i].second, own[i].second) << "step " << i;
            EXPECT_LT(rel_l2((*other)[i].first.data(), own[i].first.data(), (int)own[i].first.size()), 1e-6) << "step " << i;
        }
    }
    GpuLayerJob quest = job;  // no shared index for another method: refused by name
    quest.method = "quest";
    EXPECT_THROW(backend->build_index(quest), ParamError);
}

// Indexes built once for the layer (build_wave_heads, as the driver shares them across batch points) give
// the same steps as a run that builds its own: outputs, selections and index build time carried over; so
// does a run with the KV in device memory (kv_on_gpu), whose misses cross no bus, both with the
// execution buffers assembled on the device (gather_clusters: no host work, no lookups, no ids read back)
// and through the host's lookups.
BACKEND_TEST(PrebuiltWaveHeadsGiveTheSameSteps) {
    REQUIRE_DEVICE();
    const int H = 2, prompt = 1500, steps = 4;
    const auto heads = layer_heads(H, prompt, steps);
    GpuLayerJob job;
    job.method = "wave";
    for (const HeadSlice& h : heads) job.heads.push_back(&h);
    job.steps = {0, 1, 3};
    job.batch = 2;
    job.wave.segment = 512, job.wave.update_segment = 2;  // index updates during the steps too
    job.block_tokens = 8;
    job.cache.capacity_slots = 256;
    struct Seen {
        std::vector<float> out;
        std::vector<std::vector<int32_t>> ids;
        double h2d = 0, host_us = 0, lookups = 0, d2h = 0, attend_bytes = 0;
    };
    const auto run = [&](const GpuLayerJob& j) {
        std::vector<Seen> seen;
        gpu_run::make_cuda_backend()->run_layer(j, [&](const GpuStep& st) {
            Seen s;
            s.out.assign(st.out, st.out + (size_t)j.batch * H * kG * kD);
            for (const Selection& sel : st.selections) s.ids.emplace_back(sel.exact_for(0).begin(), sel.exact_for(0).end());
            s.h2d = st.batch_h2d_bytes;
            s.host_us = st.times.host_us, s.lookups = st.work.lookups, s.d2h = st.batch_d2h_bytes;
            s.attend_bytes = st.work.attend_bytes;
            seen.push_back(std::move(s));
        });
        return seen;
    };
    const auto own = run(job);
    const BuiltIndex built = gpu_run::build_wave_heads(job);
    ASSERT_EQ(built.wave.size(), (size_t)H);
    job.built = &built;
    const auto shared = run(job);
    const auto again = run(job);  // the built heads are copied, not changed, by a run
    // the clustered KV in device memory (the within-GPU-memory setting) and the host work on the caller
    // alone: the same selections and outputs; misses cross no bus
    GpuLayerJob on_gpu = job;
    on_gpu.kv_on_gpu = true;
    on_gpu.host_threads = 1;
    ASSERT_TRUE(on_gpu.wave_device_gather);  // the default: the device path
    const auto hbm = run(on_gpu);
    GpuLayerJob looked_up = on_gpu;
    looked_up.wave_device_gather = false;  // the same KV in device memory through the host's lookups
    const auto hbm_host = run(looked_up);
    ASSERT_EQ(hbm.size(), own.size());
    ASSERT_EQ(hbm_host.size(), own.size());
    double host_h2d = 0;
    for (size_t i = 0; i < own.size(); ++i) {
        for (const auto* other : {&hbm, &hbm_host}) {
            const Seen& o = (*other)[i];
            EXPECT_EQ(own[i].ids, o.ids) << "step " << i;
            EXPECT_EQ(o.h2d, 0.0) << "step " << i;
            EXPECT_EQ(o.attend_bytes, own[i].attend_bytes) << "step " << i;  // the same execution buffers' lengths
            double worst = 0;
            for (size_t k = 0; k < own[i].out.size(); ++k) worst = std::max(worst, (double)std::abs(own[i].out[k] - o.out[k]));
            // the device path splits the attention by its own schedule (plan_device), so on a GPU the
            // fp16 partial outputs are summed in another order: a few fp16 ulps of outputs of |x| <= ~1
            // (the H200 showed 4.9e-4 and 8.6e-4); the host-lookup path plans as the host-KV run does
            const bool device_split = other == &hbm;
            EXPECT_LT(worst, device_split ? 2e-3 : 1e-5)
                << "step " << i << (device_split ? " (device gather)" : " (host lookups)");
        }
        host_h2d += own[i].h2d;
        // the device path does no host work: no lookups, no ids read back (the host path does both)
        EXPECT_EQ(hbm[i].host_us, 0.0) << "step " << i;
        EXPECT_EQ(hbm[i].lookups, 0.0) << "step " << i;
        EXPECT_EQ(hbm[i].d2h, 0.0) << "step " << i;
        EXPECT_GT(hbm_host[i].lookups, 0.0) << "step " << i;
        EXPECT_GT(hbm_host[i].d2h, 0.0) << "step " << i;
    }
    EXPECT_GT(host_h2d, 0.0);  // the host-KV run did miss (else the comparison above shows nothing)
    ASSERT_EQ(own.size(), 3u);
    ASSERT_EQ(shared.size(), own.size());
    for (size_t i = 0; i < own.size(); ++i) {
        EXPECT_EQ(own[i].ids, shared[i].ids) << "step " << i;
        EXPECT_EQ(own[i].h2d, shared[i].h2d) << "step " << i;
        EXPECT_EQ(shared[i].ids, again[i].ids) << "step " << i;
        double worst = 0;
        for (size_t k = 0; k < own[i].out.size(); ++k) worst = std::max(worst, (double)std::abs(own[i].out[k] - shared[i].out[k]));
        EXPECT_LT(worst, 1e-5) << "step " << i;
    }
}

// Full attention on the GPU path equals exact attention (fp16 KV), GPU-resident and offloaded, with the
// library kernel (FlashInfer; its fp16 output), cuDNN's fused attention (fp16 query and output) and the
// own kernel. The prompt is not a multiple of the library's 16-token page: the padding rows must not be
// read.
BACKEND_TEST(FullMatchesExactAttention) {
    REQUIRE_DEVICE();
    const int H = 3, prompt = 700, steps = 5, B = 2;
    const auto heads = layer_heads(H, prompt, steps);
    for (const FullKernel kernel : {FullKernel::library, FullKernel::cudnn, FullKernel::own})
    for (const bool offloaded : {false, true}) {
        GpuLayerJob job;
        job.full_kernel = kernel;
        for (const HeadSlice& h : heads) job.heads.push_back(&h);
        job.steps = {0, 2, 4};
        job.batch = B;
        job.offloaded = offloaded;
        std::vector<Evaluator> ev;
        for (const HeadSlice& h : heads) ev.emplace_back(h, std::vector<int>{10});
        double worst_out = 0, worst_lse = 0;
        gpu_run::make_cuda_backend()->run_layer(job, [&](const GpuStep& st) {
            EXPECT_TRUE(st.selections.empty());
            for (int h = 0; h < H; ++h) {
                ev[(size_t)h].prepare_step(st.step);
                for (int b = 0; b < B; ++b)
                    for (int j = 0; j < kG; ++j) {
                        const size_t qh = ((size_t)b * H + h) * kG + j;
                        const HeadReference& r = ev[(size_t)h].reference(j);
                        worst_out = std::max(worst_out, rel_l2(st.out + qh * kD, r.out.data(), kD));
                        worst_lse = std::max(worst_lse, std::abs(st.lse[qh] - r.lse));
                    }
            }
            const double all = (double)H * st.n * 2 * kD * 2;
            EXPECT_DOUBLE_EQ(st.work.attend_bytes, all);
            EXPECT_DOUBLE_EQ(st.batch_h2d_bytes, offloaded ? B * all : 0.0);
        });
        const char* name = kernel == FullKernel::library ? "flashinfer" : kernel == FullKernel::cudnn ? "cudnn" : "own";
        EXPECT_LT(worst_out, 5e-3) << "fp16 KV vs float32, offloaded " << offloaded << ", kernel " << name;
        EXPECT_LT(worst_lse, 5e-3) << "offloaded " << offloaded << ", kernel " << name;
    }
}

// `retro-bench run` with cuda.sequences 2 on a two-layer synthetic trace: layer 0's batch runs layer 1's KV heads
// as its second sequence; the records say so, their accuracy — the harness's,
// from sequence 0, the layer itself — equals the copies' run, and their batch's PCIe bytes (pq offloaded) do
// not; more sequences than the trace has layers are refused before any work, by name.
BACKEND_TEST(RunWithDistinctSequences) {
    REQUIRE_DEVICE();
    ScratchDir dir;
    const std::string trace = llama3_trace(dir, 2, 1024, 32);
    // layer 0 alone (layer 1 only as its second sequence): over both layers the batch's bytes would be the same
    // sum either way
    json j = json::parse(R"({"name": "seq1", "backend": "cuda", "layers": [0], "kv_heads": [0, 1], "hardware": "h100-sxm-pcie5",
        "cuda": {"batch": 2}, "system": {"cache": 0.1, "token_block": 16}, "methods": [{"name": "full"},
        {"name": "wave"}, {"name": "quest", "params": {"k": 256, "placement": "gpu"}}, {"name": "pq", "params": {"k": 100}}]})");
    j["traces"] = {trace};
    RunnerOptions opt;
    opt.results_root = dir.path + "/results";
    const auto backend = gpu_run::make_cuda_backend();
    opt.gpu = backend.get();
    const auto copies = run_config(parse_config(j, "seq1.json"), opt);
    j["name"] = "seq2";
    j["cuda"]["sequences"] = 2;
    const auto distinct = run_config(parse_config(j, "seq2.json"), opt);
    ASSERT_EQ(copies.records.size(), 4u);
    ASSERT_EQ(distinct.records.size(), 4u);
    for (size_t r = 0; r < 4; ++r) {
        const json &c = copies.records[r], &d = distinct.records[r];
        SCOPED_TRACE(d["label"].get<std::string>());
        EXPECT_FALSE(c["cuda"].contains("sequences"));
        EXPECT_EQ(d["cuda"]["sequences"], 2);
        for (const char* m : {"recall@100", "exact_frac", "out_err", "h2d_bytes"})
            EXPECT_NEAR(c["metrics"][m]["mean"].get<double>(), d["metrics"][m]["mean"].get<double>(), 1e-6) << m;
        // the batch's PCIe bytes: the second replica misses what layer 1's selections miss, not a copy's
        if (d["method"] == "pq") {
            EXPECT_NE(c["metrics"]["gpu_h2d_bytes"]["mean"].get<double>(), d["metrics"]["gpu_h2d_bytes"]["mean"].get<double>());
        }
    }
    j["name"] = "seq3";
    j["cuda"]["sequences"] = 3;
    try {
        run_config(parse_config(j, "seq3.json"), opt);
        ADD_FAILURE() << "3 sequences from a 2-layer trace accepted";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("cuda.sequences = 3"), std::string::npos) << e.what();
    }
}

// `retro-bench run` with "backend": "cuda" on a synthetic Llama-3-shaped trace against the same config on
// the CPU backend: identical selections (recall, mass, exact and estimated fractions, post-cache PCIe
// bytes), outputs within fp16 tolerance, the measured bytes equal to the model's, and the GPU phases
// with the cost model's prediction in every record.
BACKEND_TEST(RunMatchesTheCpuBackend) {
    REQUIRE_DEVICE();
    ScratchDir dir;
    const std::string trace = llama3_trace(dir, 1, 2048, 64);
    json j = json::parse(R"({"name": "cpu", "kv_heads": [0, 1], "hardware": "h100-sxm-pcie5",
        "system": {"cache": 0.05}, "methods": [{"name": "full"}, {"name": "wave"},
        {"name": "quest", "params": {"k": 256, "placement": "gpu"}}, {"name": "pq", "params": {"k": 200}},
        {"name": "magicpig"}, {"name": "faiss_hnsw", "params": {"placement": "cpu_attention"}},
        {"name": "retrieval_attention", "params": {"nq": 20}}]})");
    j["traces"] = {trace};
    RunnerOptions opt;
    opt.results_root = dir.path + "/results";
    const auto cpu = run_config(parse_config(j, "cpu.json"), opt);
    j["name"] = "gpu";
    j["backend"] = "cuda";
    j["cuda"] = {{"batch", {1, 2}}};
    const auto backend = gpu_run::make_cuda_backend();
    opt.gpu = backend.get();
    const auto gpu = run_config(parse_config(j, "gpu.json"), opt);
    ASSERT_EQ(cpu.records.size(), 7u);
    ASSERT_EQ(gpu.records.size(), 14u);
    const auto mean = [](const json& rec, const char* m) { return rec["metrics"][m]["mean"].get<double>(); };
    for (const json& g : gpu.records) {
        const auto cpu_twin = std::find_if(cpu.records.begin(), cpu.records.end(),
                                           [&](const json& c) { return c["method"] == g["method"]; });
        ASSERT_NE(cpu_twin, cpu.records.end());
        const json& c = *cpu_twin;
        SCOPED_TRACE(g["label"].get<std::string>());
        EXPECT_EQ(g["backend"], "cuda");
        for (const char* m : {"recall@10", "recall@100", "recall@1000", "mass", "exact_frac", "est_frac"})
            EXPECT_NEAR(mean(c, m), mean(g, m), kTieSlack) << m;
        for (const char* m : {"h2d_bytes", "model_us"})
            EXPECT_NEAR(mean(c, m), mean(g, m), kTieSlack * mean(c, m) + 1e-9) << m;
        if (kTieSlack == 0) {
            EXPECT_EQ(c["metrics"]["recall@100"], g["metrics"]["recall@100"]);
        }
        EXPECT_NEAR(mean(c, "out_err"), mean(g, "out_err"), 2e-3);
        // pq: the KV offloaded (cuda.wave_kv "host", the default) through a token-level cache (token_block 1):
        // the KV the GPU read over PCIe is the model's h2d_bytes less the codes (held on the GPU; at most
        // m * nbits / 8 bytes per visible token); magicpig, faiss_hnsw, retrieval_attention: the sampled or
        // retrieved KV attended on the host, the method's h2d_bytes are the partial outputs' return
        if (g["method"] == "pq") {
            EXPECT_EQ(g["cuda"]["kv"], "host");
            EXPECT_GT(mean(g, "gpu_head_h2d_bytes"), 0.0);
            EXPECT_GE(mean(g, "h2d_bytes") - mean(g, "gpu_head_h2d_bytes"), 0.0);
            EXPECT_LE(mean(g, "h2d_bytes") - mean(g, "gpu_head_h2d_bytes"), (2048 + 3) * 2 * 6 / 8.0);
        } else if (g["method"] == "magicpig" || g["method"] == "faiss_hnsw" || g["method"] == "retrieval_attention")
            EXPECT_EQ(mean(g, "gpu_head_h2d_bytes"), 0.0);
        else
            EXPECT_NEAR(mean(g, "gpu_head_h2d_bytes"), mean(g, "h2d_bytes"), 1e-9);
        EXPECT_EQ(mean(g, "gpu_replica_diff"), 0.0);
        for (const char* m : {"gpu_step_us", "gpu_attend_us", "model_step_us", "model_attend_us"})
            EXPECT_TRUE(g["metrics"].contains(m)) << m;
        EXPECT_GT(mean(g, "model_step_us"), 0);
        EXPECT_EQ(g["cuda"]["batch"], g["batch"]);
        EXPECT_TRUE(g["cuda"]["phases"]["step"]["model_us"].is_number());
    }
    // the shared builds (GpuMethodInfo::shared_build): wave's, pq's and the CPU-index methods' instances built
    // once for the layer, both batch points reporting that one build's time
    for (const char* m : {"wave", "pq", "faiss_hnsw", "retrieval_attention"}) {
        std::vector<double> build;
        for (const json& g : gpu.records)
            if (g["method"] == m) build.push_back(mean(g, "build_ms"));
        ASSERT_EQ(build.size(), 2u) << m;
        EXPECT_GT(build[0], 0.0) << m;
        EXPECT_EQ(build[0], build[1]) << m << ": each batch point built its own";
    }
    const std::string table = summary_table(gpu.records);  // what `retro-bench run` prints
    EXPECT_NE(table.find("gpu step us p50"), std::string::npos) << table;
    EXPECT_NE(table.find("model step us"), std::string::npos) << table;
}

/// A one-layer Llama-3-8B-shaped synthetic trace under `dir` (generated by the run from its recipe), as a
/// config's "traces", and the options of a cuda run into `dir`/results on `backend`.
json llama_layer_traces(const std::string& dir, int prompt_len, int steps) {
    return json::array({{{"path", dir + "/t.h5"},
                         {"synth", {{"preset", "llama3-8b"}, {"prompt_len", prompt_len}, {"decode_steps", steps},
                                    {"num_layers", 1}, {"prefill_queries", 0}}}}});
}
RunnerOptions cuda_run_options(const std::string& dir, const GpuBackend& backend) {
    RunnerOptions opt;
    opt.results_root = dir + "/results";
    opt.gpu = &backend;
    return opt;
}

// The wave index built where the paper builds it (issue 40 #3): the prefill's segmented k-means on the GPU
// (cuda.kmeans "gpu") gives recall and output error within 1% of the CPU build's on the same trace.
BACKEND_TEST(KmeansOnTheGpuMatchesTheCpuBuild) {
    REQUIRE_DEVICE();
    ScratchDir dir;
    json j = json::parse(R"({"name": "km-cpu", "kv_heads": [0, 1], "hardware": "h100-sxm-pcie5", "backend": "cuda",
        "system": {"cache": 0.05}, "methods": [{"name": "wave"}], "metrics": {"recall_k": [100]},
        "cuda": {"batch": [1], "kmeans": "cpu"}})");
    j["traces"] = llama_layer_traces(dir.path, 4096, 4);
    const auto backend = gpu_run::make_cuda_backend();
    const RunnerOptions opt = cuda_run_options(dir.path, *backend);
    const auto cpu = run_config(parse_config(j, "km-cpu.json"), opt);
    j["name"] = "km-gpu";
    j["cuda"]["kmeans"] = "gpu";
    const auto gpu = run_config(parse_config(j, "km-gpu.json"), opt);
    ASSERT_EQ(cpu.records.size(), 1u);
    ASSERT_EQ(gpu.records.size(), 1u);
    const auto mean = [](const json& rec, const char* m) { return rec["metrics"][m]["mean"].get<double>(); };
    for (const char* m : {"recall@100", "out_err", "mass"}) {
        const double c = mean(cpu.records[0], m), g = mean(gpu.records[0], m);
        std::printf("[kmeans cpu vs gpu] %s: %.6f vs %.6f (%+.3f%%)\n", m, c, g, 100 * (g - c) / c);
        EXPECT_NEAR(g, c, 0.01 * c) << m;
    }
}

// wave's KV placement through `retro-bench run` (cuda.wave_kv, device_gather, host_threads; issue 41 #1):
// the KV in device memory selects and attends exactly as in pinned host memory (device gather and the
// host path alike), and moves nothing over PCIe.
BACKEND_TEST(RunPlacesWavesKvWhereTheConfigSays) {
    REQUIRE_DEVICE();
    ScratchDir dir;
    json j = json::parse(R"({"name": "kv", "kv_heads": [0, 1], "hardware": "h100-sxm-pcie5", "backend": "cuda",
        "system": {"cache": 0.05}, "methods": [{"name": "wave"}],
        "cuda": {"batch": [2], "wave_kv": ["host", "gpu"], "host_threads": 2}})");
    j["traces"] = llama_layer_traces(dir.path, 2048, 3);
    const auto backend = gpu_run::make_cuda_backend();
    const RunnerOptions opt = cuda_run_options(dir.path, *backend);
    const auto placed = run_config(parse_config(j, "kv.json"), opt);
    j["name"] = "kv-host-gather";
    j["cuda"]["wave_kv"] = "gpu";
    j["cuda"]["device_gather"] = false;
    const auto host_gather = run_config(parse_config(j, "kv2.json"), opt);
    ASSERT_EQ(placed.records.size(), 2u);
    ASSERT_EQ(host_gather.records.size(), 1u);
    const json& host = placed.records[0];
    const auto mean = [](const json& rec, const char* m) { return rec["metrics"][m]["mean"].get<double>(); };
    EXPECT_EQ(host["cuda"]["kv"], "host");
    EXPECT_GT(mean(host, "gpu_h2d_bytes"), 0);
    for (const json* g : {&placed.records[1], &host_gather.records[0]}) {
        SCOPED_TRACE((*g)["label"].get<std::string>());
        EXPECT_EQ((*g)["cuda"]["kv"], "gpu");
        EXPECT_NE((*g)["label"].get<std::string>().find(",kv=gpu)"), std::string::npos);
        for (const char* m : {"recall@10", "recall@100", "mass", "exact_frac", "est_frac"})
            EXPECT_NEAR(mean(host, m), mean(*g, m), 1e-9) << m;
        EXPECT_NEAR(mean(host, "out_err"), mean(*g, "out_err"), 1e-4);  // another gather order on a GPU
        EXPECT_EQ(mean(*g, "gpu_h2d_bytes"), 0.0);
        EXPECT_EQ(mean(*g, "gpu_replica_diff"), 0.0);
    }
}

// The one timing rule through `retro-bench run` (cuda.warm_steps, gpu/point_run): the first warm_steps
// selected steps run and count for accuracy but not for the GPU times (one step of three timed per
// KV head here), and a warm-up that leaves no timed step is refused before any work, naming the key.
BACKEND_TEST(WarmStepsRunButAreNotTimed) {
    REQUIRE_DEVICE();
    ScratchDir dir;
    json j = json::parse(R"({"name": "warm", "kv_heads": [0, 1], "hardware": "h100-sxm-pcie5", "backend": "cuda",
        "methods": [{"name": "wave"}, {"name": "quest", "params": {"placement": "gpu", "k": 256}}],
        "cuda": {"batch": [1], "warm_steps": 2}})");
    j["traces"] = llama_layer_traces(dir.path, 2048, 3);
    const auto backend = gpu_run::make_cuda_backend();
    const RunnerOptions opt = cuda_run_options(dir.path, *backend);
    const auto run = run_config(parse_config(j, "warm.json"), opt);
    ASSERT_EQ(run.records.size(), 2u);
    for (const json& rec : run.records) {
        SCOPED_TRACE(rec["label"].get<std::string>());
        EXPECT_EQ(rec["metrics"]["gpu_step_us"]["count"], 2) << "one timed step per KV head";
        EXPECT_EQ(rec["metrics"]["model_step_us"]["count"], 2);
        EXPECT_EQ(rec["metrics"]["scan_ops"]["count"], 6) << "every step evaluated";
        EXPECT_EQ(rec["metrics"]["h2d_bytes"]["count"], 6) << "every step replayed by the system model";
    }
    j["name"] = "warm-all";
    j["cuda"]["warm_steps"] = 3;
    try {
        run_config(parse_config(j, "warm-all.json"), opt);
        FAIL() << "a warm-up of every step was accepted";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("cuda.warm_steps = 3 leaves no timed step: the trace has 3 selected decode steps"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(dir.path + "/results/warm-all"));
}

// With no "hardware" key a cuda run measures its device and models it ("measured"): the manifest holds
// the measured profile, and full attention's modeled attend time scales with its HBM rate exactly as
// against a named profile.
BACKEND_TEST(MeasuredHardwareCalibratesTheModel) {
    REQUIRE_DEVICE();
    ScratchDir dir;
    json j = json::parse(R"({"name": "named", "backend": "cuda", "kv_heads": [0], "hardware": "h100-sxm-pcie5",
        "methods": [{"name": "full"}]})");
    j["traces"] = json::array({{{"path", dir.path + "/t.h5"},
                                {"synth", {{"preset", "smollm2"}, {"prompt_len", 256}, {"decode_steps", 2}}}}});
    RunnerOptions opt;
    opt.results_root = dir.path + "/results";
    const auto backend = gpu_run::make_cuda_backend();
    opt.gpu = backend.get();
    const auto named = run_config(parse_config(j, "named.json"), opt);
    j.erase("hardware");
    j["name"] = "measured";
    const RunConfig cfg = parse_config(j, "measured.json");
    EXPECT_EQ(cfg.hardware, "measured");
    const auto measured = run_config(cfg, opt);
    const json manifest = json::parse(read_file(measured.dir + "/manifest.json"));
    ASSERT_TRUE(manifest.contains("hardware"));
    const HardwareProfile hw = HardwareProfile::from_json(manifest["hardware"], "manifest");
    EXPECT_EQ(hw.name, "measured:" + backend->device_name());
    EXPECT_EQ(manifest["hardware_profile"], "measured");
    EXPECT_DOUBLE_EQ(hw.hbm_efficiency, 1.0);
    const HardwareProfile h100 = load_hardware_profile("h100-sxm-pcie5");
    ASSERT_EQ(named.records.size(), 1u);
    ASSERT_EQ(measured.records.size(), 1u);
    const auto attend = [](const json& r) { return r["cuda"]["phases"]["attend"]["model_us"].get<double>(); };
    EXPECT_NEAR(attend(measured.records[0]) / attend(named.records[0]), h100.hbm_B_per_us() / hw.hbm_B_per_us(),
                1e-6 * h100.hbm_B_per_us() / hw.hbm_B_per_us());
}

// "full_kernel": "flashinfer" on a shape the library kernel lacks, or "cudnn" where cuDNN does not load,
// is refused before any work, naming the reason; "own" runs it.
BACKEND_TEST(FullLibraryRefusesAnUnsupportedShapeBeforeAnyWork) {
    REQUIRE_DEVICE();
    struct NoLibrary final : GpuBackend {
        std::unique_ptr<GpuBackend> real = gpu_run::make_cuda_backend();
        std::string status() const override { return real->status(); }
        std::string device_name() const override { return real->device_name(); }
        void check_shape(int d, int g) const override { real->check_shape(d, g); }
        std::string library_unsupported(int d, int) const override {
            return "test double: no library kernel for head_dim " + std::to_string(d);
        }
        std::string cudnn_unsupported(int, int) const override { return "test double: libcudnn.so.9 not loadable"; }
        MeasuredDevice measure() const override { return real->measure(); }
        BuiltIndex build_index(const GpuLayerJob& j) const override { return real->build_index(j); }
        void run_layer(const GpuLayerJob& job, const std::function<void(const GpuStep&)>& fn) const override {
            EXPECT_EQ(job.full_kernel, FullKernel::own);
            real->run_layer(job, fn);
        }
    } nolib;
    ScratchDir dir;
    json j = json::parse(R"({"name": "gpu", "backend": "cuda", "kv_heads": [0], "methods": [{"name": "full"}]})");
    j["traces"] = json::array({{{"path", dir.path + "/t.h5"},
                                {"synth", {{"preset", "smollm2"}, {"prompt_len", 256}, {"decode_steps", 2}}}}});
    RunnerOptions opt;
    opt.results_root = dir.path + "/results";
    opt.gpu = &nolib;
    try {
        run_config(parse_config(j, "gpu.json"), opt);
        ADD_FAILURE() << "an unsupported shape ran on the library kernel";
    } catch (const ConfigError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("cuda.full_kernel \"flashinfer\": test double: no library kernel for head_dim 64"), std::string::npos)
            << m;
    }
    EXPECT_FALSE(std::filesystem::exists(opt.results_root + "/gpu"));
    j["cuda"] = {{"full_kernel", "cudnn"}};  // likewise cuDNN where the library does not load
    try {
        run_config(parse_config(j, "gpu.json"), opt);
        ADD_FAILURE() << "full attention ran on a cuDNN that does not load";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("cuda.full_kernel \"cudnn\": test double: libcudnn.so.9 not loadable"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(opt.results_root + "/gpu"));
    j["cuda"] = {{"full_kernel", "own"}};
    EXPECT_EQ(run_config(parse_config(j, "gpu.json"), opt).records.size(), 1u);
}

// A batch that does not fit in memory, and a run that fails (a kernel's launch, a library refusing), are skipped
// (named in the manifest, each saying which) while the others run; a failure that leaves the device unusable
// ends the run naming it.
BACKEND_TEST(RunSkipsABatchThatDoesNotFitOrFails) {
    REQUIRE_DEVICE();
    struct SmallDevice final : GpuBackend {
        std::unique_ptr<GpuBackend> real = gpu_run::make_cuda_backend();
        mutable bool broken = false;  // the device after a sticky fault
        bool break_on_failure = false;
        std::string status() const override { return broken ? "test: a sticky fault" : real->status(); }
        std::string device_name() const override { return "small " + real->device_name(); }
        void check_shape(int d, int g) const override { real->check_shape(d, g); }
        std::string library_unsupported(int d, int g) const override { return real->library_unsupported(d, g); }
        MeasuredDevice measure() const override { return real->measure(); }
        BuiltIndex build_index(const GpuLayerJob& j) const override { return real->build_index(j); }
        void run_layer(const GpuLayerJob& job, const std::function<void(const GpuStep&)>& fn) const override {
            if (job.batch == 2) {
                broken = break_on_failure;
                throw Error("test: the kernel's launch failed at batch 2");
            }
            if (job.batch > 2) throw GpuMemoryError("test: batch " + std::to_string(job.batch) + " does not fit");
            real->run_layer(job, fn);
        }
    } small;
    ScratchDir dir;
    json j = json::parse(R"({"name": "gpu", "backend": "cuda", "cuda": {"batch": [1, 2, 4]}, "kv_heads": [0],
        "methods": [{"name": "full"}]})");
    j["traces"] = json::array({{{"path", dir.path + "/t.h5"},
                                {"synth", {{"preset", "smollm2"}, {"prompt_len", 256}, {"decode_steps", 2}}}}});
    RunnerOptions opt;
    opt.results_root = dir.path + "/results";
    opt.gpu = &small;
    const auto out = run_config(parse_config(j, "gpu.json"), opt);
    ASSERT_EQ(out.records.size(), 1u) << json(out.records).dump(1).substr(0, 3000);
    EXPECT_EQ(out.records[0]["batch"], 1);
    EXPECT_EQ(out.records[0]["cuda"]["device"], "small " + small.real->device_name());
    ASSERT_EQ(out.failed.size(), 1u);  // the failure, not the batch that does not fit: `retro-bench run` exits 1
    EXPECT_NE(out.failed[0].find("batch=2"), std::string::npos) << out.failed[0];
    const json manifest = json::parse(read_file(out.dir + "/manifest.json"));
    EXPECT_EQ(manifest["backend"], "cuda");
    const json skipped = manifest["sessions"].back()["skipped"];
    ASSERT_EQ(skipped.size(), 2u) << skipped.dump();
    EXPECT_NE(skipped[0].get<std::string>().find("@cuda(batch=2,kernel=flashinfer): failed: test: the kernel's launch failed"),
              std::string::npos) << skipped.dump();
    EXPECT_NE(skipped[1].get<std::string>().find("@cuda(batch=4,kernel=flashinfer): does not fit: test: batch 4"),
              std::string::npos) << skipped.dump();

    small.break_on_failure = true;  // now the failure takes the device with it: batch 4 is not tried
    opt.results_root = dir.path + "/results2";
    try {
        run_config(parse_config(j, "gpu.json"), opt);
        ADD_FAILURE() << "a run on an unusable device went on";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("the device is unusable after full"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("test: a sticky fault"), std::string::npos) << e.what();
    }
}

// The host pool runs every item once on its threads and passes the first exception on.
BACKEND_TEST(HostPoolRunsEveryItemOnce) {
    gpu_run::HostPool pool(3);
    EXPECT_EQ(pool.threads(), 3);
    for (int round = 0; round < 50; ++round) {
        std::vector<std::atomic<int>> hits(97);
        pool.for_each(97, [&](int i) { ++hits[(size_t)i]; });
        for (const auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
    EXPECT_THROW(pool.for_each(10, [](int i) {
        if (i == 7) throw Error("item 7");
    }), Error);
    int n = 0;
    pool.for_each(0, [&](int) { ++n; });
    EXPECT_EQ(n, 0);
    // worker w runs the block [20w/3, 20(w+1)/3) = [0, 6), [6, 13), [13, 20), the same worker every call
    // (its caches stay warm), and a wake() between calls changes nothing
    std::vector<std::thread::id> first(20), again(20);
    pool.for_each(20, [&](int i) { first[(size_t)i] = std::this_thread::get_id(); });
    pool.wake();
    pool.wake();
    pool.for_each(20, [&](int i) { again[(size_t)i] = std::this_thread::get_id(); });
    EXPECT_EQ(first, again);
    for (int i = 0; i + 1 < 20; ++i) {
        const bool same_block = i + 1 != 6 && i + 1 != 13;
        EXPECT_EQ(first[(size_t)i] == first[(size_t)i + 1], same_block) << i;
    }
    EXPECT_NE(first[0], first[19]);
    EXPECT_NE(first[0], std::this_thread::get_id());
    // a pool whose workers went to sleep (no spinning) still wakes for work
    gpu_run::HostPool sleepy(2, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::atomic<int> count{0};
    sleepy.for_each(7, [&](int) { ++count; });
    EXPECT_EQ(count.load(), 7);
    // one worker: the caller runs the items itself
    gpu_run::HostPool one(1);
    std::set<std::thread::id> ran;
    one.for_each(4, [&](int) { ran.insert(std::this_thread::get_id()); });
    EXPECT_EQ(ran, std::set<std::thread::id>{std::this_thread::get_id()});
}

// The driver reads a profile as python/retro_bench/gpu/hardware_values.py writes it: the same numbers as the JSON file.
BACKEND_TEST(HardwareValuesMatchTheProfile) {
    ScratchDir dir;
    const std::string values = dir.path + "/hw.txt";
    const std::string src = source_dir();
    const std::string cmd = "python3 '" + src + "/python/retro_bench/gpu/hardware_values.py' '" + src +
                            "/configs/hardware/h200.json' > '" + values + "'";
    if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "no python3";
    const HardwareSpec got = gpu_run::read_hardware_values(values);
    const HardwareProfile want = load_hardware_profile("h200");
    EXPECT_EQ(got.name, "h200");
    for (const std::string& f : hardware_fields()) EXPECT_EQ(hardware_field(got, f), hardware_field(want, f)) << f;
    std::ofstream(values, std::ios::app) << "hbm_GBps -3\n";
    EXPECT_THROW(gpu_run::read_hardware_values(values), Error);
}

// The GPU method registry (gpu/gpu_methods.hpp, issue 41 #2): every GPU twin is a method of the CPU
// registry, has a layer run in the backend and a binding of its parameters, and its defaults make a job
// its own check accepts; a method without a twin is refused by name, by the config check and the backend.
TEST(GpuMethods, EveryTwinHasItsCpuMethodALayerRunAndItsParameters) {
    ASSERT_FALSE(gpu_method_registry().empty());
    for (const GpuMethodInfo& m : gpu_method_registry()) {
        SCOPED_TRACE(m.name);
        EXPECT_NO_THROW(find_method(m.name));
        EXPECT_NE(gpu_run::find_layer_run(m.name), nullptr);
        EXPECT_EQ(find_gpu_method(m.name), &m);
        MethodRun r;
        r.method = m.name;
        json given = json::object();
        for (const auto& [name, value] : m.required_params) given[name] = value;
        r.params = resolve_params(find_method(m.name), given);
        r.batch = 2;
        const GpuLayerJob job = gpu_job_for(r, CudaOptions{}, "test");
        EXPECT_EQ(job.method, m.name);
        EXPECT_EQ(job.batch, 2);
        EXPECT_NO_THROW(m.check(job));
        EXPECT_TRUE(m.overlap);
    }
    EXPECT_EQ(find_gpu_method("ctkvr"), nullptr);
    EXPECT_EQ(gpu_run::find_layer_run("ctkvr"), nullptr);
    MethodRun q;
    q.method = "ctkvr";
    q.params = resolve_params(find_method("ctkvr"), json::object());
    try {
        gpu_job_for(q, CudaOptions{}, "run ctkvr");
        FAIL() << "ctkvr has no GPU twin yet";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("run ctkvr: backend 'cuda' runs the methods with a GPU twin only (" +
                                             gpu_method_names() + "), not 'ctkvr'"),
                  std::string::npos)
            << e.what();
    }
    // a GQA ranking the GPU cannot make bit-exact is refused by name (pq's softmax_sum)
    MethodRun ps;
    ps.method = "pq";
    ps.params = resolve_params(find_method("pq"), {{"gqa", "softmax_sum"}});
    try {
        gpu_job_for(ps, CudaOptions{}, "run pq");
        FAIL() << "pq with gqa softmax_sum was accepted on the GPU";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("pq parameter 'gqa' = \"softmax_sum\""), std::string::npos) << e.what();
    }
    // a twin's required parameter at another value is refused by name (quest keeps the KV in HBM)
    MethodRun qo;
    qo.method = "quest";
    qo.params = resolve_params(find_method("quest"), {{"placement", "offload"}});
    try {
        gpu_job_for(qo, CudaOptions{}, "run quest");
        FAIL() << "quest with placement offload was accepted on the GPU";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("quest parameter 'placement' = \"offload\""), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("set \"placement\": \"gpu\""), std::string::npos) << e.what();
    }
    GpuLayerJob job;
    job.method = "ctkvr";
    EXPECT_THROW(gpu_run::make_cuda_backend()->run_layer(job, [](const GpuStep&) {}), ParamError);
}

// The wave-vs-full run stopped between rows (WaveRunOptions::stop: retro_gpu_check's --time-budget and its
// SIGTERM, a lease's limit): no row starts after stop() said so, the rows before it are kept whole (their
// speed-ups, dense time and tokens/s), and the same rows run without a stop measure the same points.
BACKEND_TEST(WaveRunStopsBetweenRowsAndKeepsItsRows) {
    REQUIRE_DEVICE();
    gpu_run::WaveRunOptions o;
    gpu_run::make_tiny(o);
    o.wave_ablation = o.wave_hbm = o.pq = o.magicpig = o.full_cudnn = false;  // full, full-own, wave, wave-dev, quest
    const auto backend = gpu_run::make_cuda_backend();
    const auto all = gpu_run::run_wave_vs_full(*backend, o, nullptr);
    ASSERT_GE(all.size(), 6u);
    int asked = 0;
    o.stop = [&] { return ++asked > 4; };  // the context, then three rows: the fourth is refused
    const auto cut = gpu_run::run_wave_vs_full(*backend, o, nullptr);
    EXPECT_EQ(asked, 5);  // asked no more once it said stop
    ASSERT_EQ(cut.size(), 3u);
    for (size_t i = 0; i < cut.size(); ++i) {
        SCOPED_TRACE(cut[i].method + " B=" + std::to_string(cut[i].batch));
        EXPECT_EQ(cut[i].method, all[i].method);
        EXPECT_EQ(cut[i].batch, all[i].batch);
        EXPECT_EQ(cut[i].status, "ok");
        EXPECT_GT(cut[i].tokens_per_s, 0) << "the dense layer still timed for the rows kept";
        EXPECT_FALSE(cut[i].baseline.empty()) << "speed-ups set over the rows kept";
    }
    o.stop = [] { return true; };  // stopped before the first context: no row, no error
    EXPECT_TRUE(gpu_run::run_wave_vs_full(*backend, o, nullptr).empty());
}

// A kind that fails costs its own rows, not the run's (a lease's table must survive one new kernel's failure):
// pq with sub-spaces that do not divide head_dim fails each of its kinds by name, once (its other batches are
// not tried); the rows before it and after it (magicpig) are measured and reported.
BACKEND_TEST(WaveRunKeepsItsRowsWhenAKindFails) {
    REQUIRE_DEVICE();
    gpu_run::WaveRunOptions o;
    gpu_run::make_tiny(o);
    o.wave_ablation = o.wave_hbm = o.full_cudnn = false;
    o.pq_params.head.m = 7;  // head_dim 64: not a divisor
    const auto backend = gpu_run::make_cuda_backend();
    const auto rows = gpu_run::run_wave_vs_full(*backend, o, nullptr);
    int failed = 0, ok_before = 0, ok_after = 0;
    for (const auto& r : rows) {
        SCOPED_TRACE(r.method + " B=" + std::to_string(r.batch));
        if (r.method == "pq" || r.method == "pq-hbm") {
            EXPECT_EQ(r.status.rfind("failed: ", 0), 0u) << r.status;
            EXPECT_NE(r.status.find("m = 7 must divide the head dimension 64"), std::string::npos) << r.status;
            ++failed;
        } else {
            EXPECT_EQ(r.status, "ok");
            ++(failed ? ok_after : ok_before);
        }
    }
    EXPECT_EQ(failed, 2);
    EXPECT_GE(ok_before, 8);  // full, full-own, wave, wave-dev, quest at batches 1 and 2
    EXPECT_EQ(ok_after, 2);   // magicpig at batches 1 and 2
}

#if defined(RETRO_HAVE_CUDA) && !defined(RETRO_GPU_EMULATION)
// The real backend on a machine without a usable device: `"backend": "cuda"` fails before any work,
// naming the backend and device_status()'s reason, and writes nothing.
TEST(CudaBackend, WithoutADeviceRunFailsBeforeAnyWork) {
    if (cuda::device_available()) GTEST_SKIP() << "a CUDA device is present";
    const auto backend = gpu_run::make_cuda_backend();
    ASSERT_FALSE(backend->status().empty());
    ScratchDir dir;
    json j = json::parse(R"({"name": "gpu", "backend": "cuda", "methods": [{"name": "wave"}]})");
    j["traces"] = json::array({{{"path", dir.path + "/t.h5"},
                                {"synth", {{"preset", "smollm2"}, {"prompt_len", 256}, {"decode_steps", 2}}}}});
    RunnerOptions opt;
    opt.results_root = dir.path + "/results";
    opt.gpu = backend.get();
    try {
        run_config(parse_config(j, "gpu.json"), opt);
        FAIL() << "a cuda run started without a device";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("backend 'cuda': no usable CUDA device: " + backend->status()),
                  std::string::npos)
            << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(opt.results_root));
    EXPECT_FALSE(std::filesystem::exists(dir.path + "/t.h5"));
}
#endif

#else
TEST(CudaBackend, RunsOnTheGpu) { GTEST_SKIP() << "built without CUDA (no nvcc)"; }
#endif
