#include "bench/cuda_runner.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

#include "bench/gpu_job_params.hpp"
#include "bench/head_run.hpp"
#include "core/threads.hpp"
#include "gpu/gpu_methods.hpp"
#include "gpu/point_run.hpp"
#include "methods/params.hpp"
#include "metrics/evaluator.hpp"
#include "system/head_system.hpp"

namespace retro {

using json = nlohmann::json;

void check_cuda_backend(const GpuBackend* gpu) {
    if (!gpu)
        throw ConfigError("backend 'cuda': this retro-bench was built without CUDA (no nvcc when it was "
                          "configured); rebuild with nvcc on PATH or use \"backend\": \"cpu\"");
    const std::string why = gpu->status();
    if (!why.empty()) throw ConfigError("backend 'cuda': no usable CUDA device: " + why);
}

void check_cuda_trace(const PreparedTrace& t, const RunConfig& cfg, const GpuBackend& gpu) {
    try {
        gpu.check_shape(t.info.head_dim, t.info.group_size());
    } catch (const ParamError& e) {
        throw ConfigError(t.spec.path + ": " + e.what());
    }
    const auto uses = [&](const char* kernel) {
        return std::any_of(cfg.runs.begin(), cfg.runs.end(), [&](const MethodRun& r) { return r.kernel == kernel; });
    };
    if (uses("flashinfer")) {
        const std::string why = gpu.library_unsupported(t.info.head_dim, t.info.group_size());
        if (!why.empty())
            throw ConfigError(t.spec.path + ": backend 'cuda' full attention with cuda.full_kernel \"flashinfer\": " + why);
    }
    if (uses("cudnn")) {
        const std::string why = gpu.cudnn_unsupported(t.info.head_dim, t.info.group_size());
        if (!why.empty())
            throw ConfigError(t.spec.path + ": backend 'cuda' full attention with cuda.full_kernel \"cudnn\": " + why);
    }
    for (const MethodRun& r : cfg.runs)  // a point the GPU twin refuses for this trace's shape (pq's cache units)
        if (r.batch > 0) {
            GpuLayerJob job = gpu_job_for(r, cfg.cuda, t.spec.path + ": run " + r.label());
            set_job_cache(r, t.info.head_dim, t.info.prompt_len, job, t.spec.path + ": run " + r.label());
        }
    if (cfg.cuda.sequences > (int)t.info.layers.size())
        throw ConfigError(t.spec.path + ": cuda.sequences = " + std::to_string(cfg.cuda.sequences) + " takes the other " +
                          "sequences from the trace's other layers; it holds " + std::to_string(t.info.layers.size()) +
                          " (a synthetic trace: \"num_layers\" >= " + std::to_string(cfg.cuda.sequences) + ")");
    if (cfg.cuda.warm_steps >= (int)t.steps.size())
        throw ConfigError(t.spec.path + ": cuda.warm_steps = " + std::to_string(cfg.cuda.warm_steps) +
                          " leaves no timed step: the trace has " + std::to_string(t.steps.size()) +
                          " selected decode steps (warm_steps must be fewer)");
    if (cfg.kv_dtype == "trace" && t.info.dtype != DType::f16)
        throw ConfigError(t.spec.path + ": backend 'cuda' stores the KV as float16 but the trace is " +
                          dtype_name(t.info.dtype) + ": set \"kv_dtype\": \"float16\"");
}

namespace {

/// What one (run, KV head) accumulates over the steps.
struct HeadState {
    HeadPart part;
    std::unique_ptr<HeadSystem> sys;
    std::unique_ptr<Evaluator> ev;
    /// A GPU method that does not report its selection (GpuMethodInfo::gpu_selects): its CPU twin gives it
    std::unique_ptr<Method> twin;
    Selection sel;
    std::vector<float> qbuf;        ///< [group, d] the step's queries for the twin
    std::vector<QueryMetrics> qm;   ///< the step's metrics per query head
};

}  // namespace

void run_cuda_layer(const RunConfig& cfg, const PreparedTrace& tr, const TraceReader& reader,
                    const CudaLayerJob& job, const std::vector<std::string>& run_ids,
                    const std::vector<MetricInfo>& reg, const ResultsDir& rd, const HardwareProfile& hw,
                    const GpuBackend& gpu, std::map<size_t, std::string>& skipped) {
    ReadOptions ro;
    ro.max_steps = tr.steps.back() + 1;
    std::vector<HeadSlice> slices;
    for (int h : tr.kv_heads) slices.push_back(reader.read_head(job.layer, h, ro));
    const int H = (int)slices.size(), d = slices[0].head_dim, g = slices[0].group;
    std::vector<const HeadSlice*> ptrs;
    for (const HeadSlice& s : slices) ptrs.push_back(&s);
    // batches of distinct sequences (cuda.sequences): sequence q is the same KV heads of layer l + q (mod the
    // trace's layers), standing in for another request; the harness evaluates layer l (sequence 0) alone
    std::vector<HeadSlice> more_slices;
    std::vector<const HeadSlice*> more;
    const std::vector<int>& present = tr.info.layers;
    const auto at = std::find(present.begin(), present.end(), job.layer) - present.begin();
    for (int q = 1; q < cfg.cuda.sequences; ++q)
        for (int h : tr.kv_heads) more_slices.push_back(reader.read_head(present[(size_t)(at + q) % present.size()], h, ro));
    for (const HeadSlice& s : more_slices) more.push_back(&s);

    // the shared indexes (wave's, pq's, the CPU-index methods': GpuMethodInfo::shared_build) per method and
    // parameters, shared by the batch points and placements (the index depends on neither): built on the first
    // run that needs them, over the sequences the largest batch runs, and dropped after the last (host memory:
    // the CPU-index methods' instances are copied for every replica); a build that failed is not tried again
    std::map<std::string, BuiltIndex> built;
    std::map<std::string, std::string> build_failed;
    std::map<std::string, size_t> last_use;  // key -> the last run of this layer that uses it
    const auto key_of = [&](const MethodRun& mr) { return mr.method + mr.params.dump(); };
    int max_batch = 1;
    for (size_t r : job.runs) {
        last_use[key_of(cfg.runs[r])] = r;
        max_batch = std::max(max_batch, cfg.runs[r].batch);
    }
    const std::vector<const HeadSlice*> build_more(
        more.begin(), more.begin() + (ptrdiff_t)((size_t)(std::min(cfg.cuda.sequences, max_batch) - 1) * H));
    for (size_t r : job.runs) {
        if (skipped.count(r)) continue;
        const MethodRun& mr = cfg.runs[r];
        const std::string key = key_of(mr);
        const SystemParams sp = mr.system.is_null() ? SystemParams{} : SystemParams::from_json(mr.system, "system");
        GpuLayerJob gj = gpu_job_for(mr, cfg.cuda, "run " + mr.label());
        const GpuMethodInfo& gm = *find_gpu_method(gj.method);
        std::vector<HeadState> heads((size_t)H);
        for (int h = 0; h < H; ++h) {
            const HeadSlice& sl = slices[(size_t)h];
            HeadState& X = heads[(size_t)h];
            X.part = new_head_part(run_ids[r], sl, tr.steps, tr.fingerprint, reg);
            HeadSystemContext sc;
            sc.method = mr.method, sc.params = mr.params, sc.head_dim = d, sc.group = g, sc.elem_bytes = 2.0;
            sc.prompt_len = sl.prompt_len, sc.num_kv_heads = tr.info.num_kv_heads;
            X.sys = std::make_unique<HeadSystem>(sp, hw, sc);
            X.ev = std::make_unique<Evaluator>(sl, cfg.recall_k);
            if (!gm.gpu_selects) {  // the CPU twin gives the selection (full: every visible token)
                X.qbuf.resize((size_t)g * d);
                X.twin = find_method(mr.method).make(mr.params);
                X.twin->build(head_context(sl, DType::f16), KVView{sl.keys.data(), sl.values.data(), sl.prompt_len, d});
            }
        }
        gj.heads = ptrs;
        gj.more_heads = more;
        gj.steps = tr.steps;
        set_job_cache(mr, d, slices[0].prompt_len, gj, "run " + mr.label());  // as the system model sizes it
        // the one timing rule (gpu/point_run): warm-up steps are evaluated and replayed by the system model
        // like every step, their GPU times left out
        const GpuPointOptions po{cfg.cuda.warm_steps, &hw, sp.lookup_ns};
        double build_ms = 0;
        const auto on_step = [&](const GpuStep& st, const GpuStepSample* sample) {
            build_ms = st.index_build_ms / H;
            // the heads side by side: each one's evaluation (exact attention over every visible token: ~14 ms
            // a head at 128K) is its own, and one after another they held the device idle for seconds a run
            for_each_item(H, 0, [&](int h) {
                HeadState& X = heads[(size_t)h];
                const HeadSlice& sl = slices[(size_t)h];
                std::vector<QueryMetrics>& qm = X.qm;
                const Selection* sel = nullptr;
                Footprint fp;
                if (gm.gpu_selects) {
                    sel = &st.selections[(size_t)h];
                    fp = st.footprints[(size_t)h];
                } else {
                    const KVView kv{sl.keys.data(), sl.values.data(), st.n, d};
                    for (int j = 0; j < g; ++j)
                        std::copy(sl.query(j, st.step), sl.query(j, st.step) + d, X.qbuf.begin() + (size_t)j * d);
                    X.twin->append(kv, st.n - 1);
                    X.sel.clear();
                    X.twin->select(X.qbuf.data(), st.step, kv, X.sel);
                    sel = &X.sel;
                    fp = X.twin->footprint();
                }
                X.ev->prepare_step(st.step);
                X.ev->evaluate_output(*sel, mr.method, st.out + (size_t)h * g * d, st.lse + (size_t)h * g, qm);
                add_query_metrics(X.part, qm, cfg.recall_k);
                auto& kv = X.part.kv_metrics;
                kv["scan_ops"].push_back(sel->scan_ops / st.n);
                X.sys->record(*sel, st.n, fp);
                if (!sample) return;  // a warm-up step: not timed
                const GpuStepTimes& t = sample->times;
                kv["gpu_select_us"].push_back(t.select_us);
                kv["gpu_estimate_us"].push_back(t.estimate_us);
                kv["gpu_gather_us"].push_back(t.gather_us);
                kv["gpu_attend_us"].push_back(t.attend_us);
                kv["gpu_step_us"].push_back(t.step_us);
                kv["gpu_host_us"].push_back(t.host_us);
                kv["gpu_admit_us"].push_back(t.admit_us);
                kv["gpu_total_us"].push_back(t.total_us());
                kv["gpu_gate_timed_out"].push_back(t.gate_timed_out ? 1.0 : 0.0);
                kv["gpu_graph_us"].push_back(t.graph_us);
                kv["gpu_h2d_bytes"].push_back(sample->batch_h2d_bytes);
                kv["gpu_d2h_bytes"].push_back(sample->batch_d2h_bytes);
                kv["gpu_head_h2d_bytes"].push_back(st.head_h2d_bytes[(size_t)h]);
                kv["gpu_replica_diff"].push_back(sample->replica_diff);
                kv["model_select_us"].push_back(sample->model.select_us);
                kv["model_h2d_us"].push_back(sample->model.h2d_us);
                kv["model_attend_us"].push_back(sample->model.attend_us);
                kv["model_step_us"].push_back(sample->model.attention_us);
            });
        };
        const auto drop_unused = [&] {
            if (last_use[key] == r) built.erase(key);
        };
        try {
            if (gm.shared_build) {
                if (const auto f = build_failed.find(key); f != build_failed.end()) throw Error(f->second);
                auto it = built.find(key);
                if (it == built.end()) {
                    GpuLayerJob bj = gj;
                    bj.more_heads = build_more;
                    try {
                        it = built.emplace(key, gpu.build_index(bj)).first;
                    } catch (const GpuMemoryError&) {
                        throw;
                    } catch (const std::exception& e) {
                        build_failed[key] = std::string("its index build failed: ") + e.what();
                        throw Error(build_failed[key]);
                    }
                }
                gj.built = &it->second;
            }
            run_gpu_point(gpu, gj, gm, po, on_step);
        } catch (const GpuMemoryError& e) {
            skipped[r] = mr.label() + ": does not fit: " + e.what();
            drop_unused();
            continue;
        } catch (const std::exception& e) {
            // a run that fails (a kernel's launch, a library, a selection the evaluator refuses) costs its own
            // point, not the config's later ones: listed in the manifest as failed (the run's exit status says
            // so), tried again by --resume; a device the failure left unusable (a kernel's fault is sticky) ends
            // the layer. gpu.status() also clears a failed call's pending error, which would fail the next run.
            skipped[r] = mr.label() + ": " + std::string(kFailedRun) + e.what();
            drop_unused();
            if (const std::string why = gpu.status(); !why.empty())
                throw Error("the device is unusable after " + mr.label() + " failed (" + e.what() + "): " + why);
            continue;
        }
        drop_unused();
        for (HeadState& X : heads) {
            X.sys->finish(X.part.kv_metrics);  // h2d_bytes, cache_hit, model_us, ... as for the CPU backend
            X.part.build_ms = build_ms;
            rd.write_part(X.part);
        }
    }
}

json cuda_record_summary(const json& metrics, int batch, const std::string& device) {
    const auto mean = [&](const char* k) {
        return metrics.contains(k) && metrics[k].contains("mean") && metrics[k]["mean"].is_number()
                   ? metrics[k]["mean"].get<double>()
                   : std::nan("");
    };
    const auto row = [](double measured, double model) {
        const auto num = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
        return json{{"measured_us", num(measured)}, {"model_us", num(model)},
                    {"measured_over_model", num(model > 0 ? measured / model : std::nan(""))}};
    };
    // the model's select_us reads the index for the ranking and the estimation: both kernels
    return {{"device", device},
            {"batch", batch},
            {"phases",
             {{"select", row(mean("gpu_select_us") + mean("gpu_estimate_us"), mean("model_select_us"))},
              {"gather", row(mean("gpu_gather_us"), mean("model_h2d_us"))},
              {"attend", row(mean("gpu_attend_us"), mean("model_attend_us"))},
              {"step", row(mean("gpu_step_us"), mean("model_step_us"))},
              // what a throughput must use: the step with its admission (the model has none: the paper's
              // asynchronous update)
              {"total", row(mean("gpu_total_us"), mean("model_step_us"))}}},
            {"pcie_bytes_per_step", mean("gpu_h2d_bytes")}};
}

}  // namespace retro
