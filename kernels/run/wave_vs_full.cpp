#include "run/wave_vs_full.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>

#include "common/bench_util.hpp"
#include "core/check.hpp"
#include "gpu/gpu_methods.hpp"
#include "gpu/prediction.hpp"
#include "gpu/point_run.hpp"
#include "metrics/evaluator.hpp"

namespace retro::gpu_run {

namespace {

/// The layer's shared index over the prompt for `method` (wave's indexes, pq's quantizers and codes), as
/// run_point's job would build it.
BuiltIndex build_index(const GpuBackend& gpu, const WaveRunOptions& o, const std::vector<HeadSlice>& heads,
                       const std::vector<const HeadSlice*>& more, const std::string& method) {
    GpuLayerJob job;
    job.method = method;
    for (const HeadSlice& h : heads) job.heads.push_back(&h);
    job.more_heads = more;  // every sequence's heads: the batches share them
    job.steps = {0};
    job.wave = o.wave;
    job.pq = o.pq_params;
    job.kmeans_on_gpu = o.kmeans_on_gpu;
    return gpu.build_index(job);
}

/// One row kind: its label, a GPU method (gpu/gpu_methods.hpp), full's kernel, wave's KV placement.
struct Kind {
    std::string label;  ///< full, full-cudnn, full-own, wave, wave-dev, wave-dev-async, wave-dev-nocache, wave-hbm, ...
    std::string method;
    FullKernel fk = FullKernel::library;
    bool kv_on_gpu = false;
    bool device_gather = true;  ///< GpuLayerJob::wave_device_gather (the KV in host memory: the device lookups)
    bool async_update = false;  ///< GpuLayerJob::async_update
    bool no_cache = false;      ///< no GPU block cache (every retrieval cluster read over PCIe): the ablation's first bar
};

std::string method_label(const Kind& k) { return k.label; }

/// The speedups of rows[first..] (one context): the fastest full row of each batch is the baseline, every
/// other measured row's speedup its step time over the row's — the step with its admission
/// (GpuStepTimes::total_us: the one timing rule, issue 40 #1).
void set_speedups(std::vector<WaveRunRow>& rows, size_t first) {
    std::map<int, const WaveRunRow*> best;
    for (size_t i = first; i < rows.size(); ++i) {
        const WaveRunRow& r = rows[i];
        if (r.status != "ok" || r.method.rfind("full", 0) != 0 || !(r.measured.total_us() > 0)) continue;
        const WaveRunRow*& b = best[r.batch];
        if (!b || r.measured.total_us() < b->measured.total_us()) b = &r;
    }
    for (size_t i = first; i < rows.size(); ++i) {
        WaveRunRow& r = rows[i];
        const auto it = best.find(r.batch);
        if (it == best.end() || r.status != "ok") continue;
        r.baseline = it->second->method;
        if (&r != it->second) r.speedup = it->second->measured.total_us() / r.measured.total_us();
    }
}

/// Runs one (method, context, batch) and averages its steps; evaluates accuracy at batch 1.
WaveRunRow run_point(const GpuBackend& gpu, const WaveRunOptions& o, const Kind& kind,
                     const std::vector<HeadSlice>& heads, const std::vector<const HeadSlice*>& more, int batch,
                     const BuiltIndex* built) {
    const HeadSlice& h0 = heads[0];
    const GpuMethodInfo& m = *find_gpu_method(kind.method);
    GpuLayerJob job;
    job.method = m.name;
    job.full_kernel = kind.fk;
    job.kv_on_gpu = kind.kv_on_gpu;
    job.wave_device_gather = kind.device_gather;
    job.async_update = kind.async_update;
    job.host_threads = o.host_threads;
    for (const HeadSlice& h : heads) job.heads.push_back(&h);
    job.steps.resize((size_t)h0.num_steps);
    std::iota(job.steps.begin(), job.steps.end(), 0);
    job.batch = batch;
    job.wave = o.wave;
    job.quest = o.quest_params;
    job.pq = o.pq_params;
    job.magicpig = o.magicpig_params;
    job.kmeans_on_gpu = o.kmeans_on_gpu;
    job.block_tokens = cache_block_tokens(o.block_bytes, h0.head_dim, 2.0);
    job.unit_tokens = o.token_block;
    job.cache.capacity_slots =
        kind.no_cache ? 0 : cache_capacity_slots(o.cache, 0, h0.prompt_len, h0.head_dim, 2.0, job.block_tokens);
    job.warmup = o.warmup;
    job.launch_gate = o.launch_gate;
    job.built = built;
    job.more_heads = more;
    job.step_graph = o.step_graph && m.step_graph;
    if (job.step_graph) try {  // a row whose step cannot be one graph (wave's host lookups, its async update) runs without
            check_gpu_job(m, job);
        } catch (const ParamError&) {
            job.step_graph = false;
        }

    WaveRunRow row;
    row.method = method_label(kind);
    row.context = h0.prompt_len, row.batch = batch, row.modeled = o.hw != nullptr;
    row.launch_gate = o.launch_gate;
    row.step_graph = job.step_graph;
    std::vector<Evaluator> ev;
    if (batch == 1)
        for (const HeadSlice& h : heads) ev.emplace_back(h, std::vector<int>{100});
    double err = 0, rec = 0;
    long evaluated = 0;
    Selection all;  // full attends every visible token
    std::vector<QueryMetrics> qm;
    const GpuPointOptions po{o.warm_steps, o.hw, o.lookup_ns};
    const GpuStepMeans means = run_gpu_point(gpu, job, m, po, [&](const GpuStep& st, const GpuStepSample* sample) {
        if (!sample) return;  // a warm-up step
        row.kv_bytes += st.work.attend_bytes * batch;
        row.index_bytes += st.work.index_bytes * batch;
        for (size_t h = 0; h < ev.size(); ++h) {
            ev[h].prepare_step(st.step);
            ev[h].evaluate_output(gpu_step_selection(st, m, h, all), row.method, st.out + h * h0.group * h0.head_dim,
                                  st.lse + h * h0.group, qm);
            for (const QueryMetrics& q : qm) err += q.out_err, rec += q.recall[0], ++evaluated;
        }
    });
    row.steps = means.steps;
    row.measured = means.times;
    row.gate_timeouts = means.gate_timeouts;
    row.h2d_bytes = means.batch_h2d_bytes;
    row.replica_diff = means.replica_diff_max;
    row.model_select_us = means.model.select_us, row.model_h2d_us = means.model.h2d_us;
    row.model_attend_us = means.model.attend_us, row.model_step_us = means.model.attention_us;
    for (double* x : {&row.kv_bytes, &row.index_bytes}) *x /= std::max(1, row.steps);
    if (evaluated > 0) row.out_err = err / evaluated, row.recall = rec / evaluated;
    if (o.hbm_bytes_per_s > 0 && row.measured.step_us > 0)
        row.hbm_frac = row.kv_bytes / (row.measured.step_us * 1e-6) / o.hbm_bytes_per_s;
    return row;
}

/// The median time of one DenseLayer forward at `batch`, timed as the microbenchmarks time a kernel
/// (bench_util::median_us: warm-up, each call behind a launch gate).
double time_dense(cuda::DenseLayer& layer, int batch, int reps) {
    const cuda::DenseShape& s = layer.shape();
    cuda::DeviceBuffer<uint16_t> x((size_t)batch * s.hidden), attn((size_t)batch * s.attn());
    cuda::dev_memset(x.get(), 0x3C, x.bytes());  // ones: a bounded residual stream
    cuda::dev_memset(attn.get(), 0x00, attn.bytes());
    return cuda::bench_util::median_us([&] { layer.forward(batch, x.get(), attn.get()); }, std::max(1, reps));
}

std::string num(double v) {
    if (!std::isfinite(v)) return "null";
    char b[64];
    std::snprintf(b, sizeof b, "%.6g", v);
    return b;
}

// The calibrated phase model: per method whose every phase runs on the device (no host phase, nothing
// over PCIe), the select phase (rank + estimation) against the index bytes and the attend phase (gather +
// attention) against the KV bytes attended, each a PhaseFit to the method's rows at the smallest
// context's smallest and largest batch, then predicted for every row of the method: the other batches and
// contexts test it.
void calibrate_phases(std::vector<WaveRunRow>& rows) {
    std::map<std::string, std::vector<WaveRunRow*>> by;
    for (WaveRunRow& r : rows)
        if (r.status == "ok" && r.steps > 0 && r.measured.host_us == 0 && r.h2d_bytes == 0 && !r.step_graph)
            by[r.method].push_back(&r);  // (a graph's phases are not timed)
    for (auto& [method, rs] : by) {
        int ctx = rs.front()->context;
        for (const WaveRunRow* r : rs) ctx = std::min(ctx, r->context);
        WaveRunRow *lo = nullptr, *hi = nullptr;
        for (WaveRunRow* r : rs) {
            if (r->context != ctx) continue;
            if (!lo || r->batch < lo->batch) lo = r;
            if (!hi || r->batch > hi->batch) hi = r;
        }
        if (!lo || lo == hi) continue;
        const auto select_us = [](const WaveRunRow* r) { return r->measured.select_us + r->measured.estimate_us; };
        const auto attend_us = [](const WaveRunRow* r) { return r->measured.gather_us + r->measured.attend_us; };
        const bool has_select = lo->index_bytes > 0;
        const PhaseFit sel = PhaseFit::fit({{lo->index_bytes, select_us(lo)}, {hi->index_bytes, select_us(hi)}});
        const PhaseFit att = PhaseFit::fit({{lo->kv_bytes, attend_us(lo)}, {hi->kv_bytes, attend_us(hi)}});
        if (!att.fitted() || (has_select && !sel.fitted())) continue;
        lo->calibration_point = hi->calibration_point = true;
        for (WaveRunRow* r : rs) {
            r->cal_select_us = has_select ? sel.predict_us(r->index_bytes) : 0.0;
            r->cal_attend_us = att.predict_us(r->kv_bytes);
            r->cal_step_us = r->cal_select_us + r->cal_attend_us;
        }
    }
}

std::string row_header() {
    char line[400];
    std::snprintf(line, sizeof line, "%-8s %7s %5s %10s %10s %6s %10s %9s %9s %9s %9s %9s %11s %8s %9s %8s %9s %9s %9s\n", "",
                  "N", "B", "step_us", "total_us", "HBM%", "model_us", "rank", "estimate", "gather", "attend", "host",
                  "PCIe MB", "speedup", "out_err", "recall", "cal_us", "dense_us", "tok/s");
    return line;
}

std::string row_line(const WaveRunRow& r) {
    if (r.status != "ok") return r.method + " N=" + std::to_string(r.context) + " B=" + std::to_string(r.batch) + ": " +
                                 r.status + "\n";
    char line[400], hbm[16] = "-";
    if (r.hbm_frac > 0) std::snprintf(hbm, sizeof hbm, "%.0f", 100 * r.hbm_frac);
    char cal[24] = "-";
    if (r.cal_step_us > 0) std::snprintf(cal, sizeof cal, "%.1f%s", r.cal_step_us, r.calibration_point ? "*" : "");
    char dense[24] = "-", tps[24] = "-";
    if (r.dense_us > 0) std::snprintf(dense, sizeof dense, "%.1f", r.dense_us), std::snprintf(tps, sizeof tps, "%.0f", r.tokens_per_s);
    std::snprintf(line, sizeof line, "%-8s %7d %5d %10.1f %10.1f %6s %10s %9.1f %9.1f %9.1f %9.1f %9.1f %11.2f %8s %9s %8s %9s %9s %9s\n",
                  r.method.c_str(), r.context, r.batch, r.measured.step_us, r.measured.total_us(), hbm,
                  r.modeled ? num(r.model_step_us).c_str() : "-", r.measured.select_us, r.measured.estimate_us,
                  r.measured.gather_us, r.measured.attend_us, r.measured.host_us, r.h2d_bytes / 1e6,
                  r.speedup > 0 ? num(r.speedup).c_str() : "-", r.out_err >= 0 ? num(r.out_err).c_str() : "-",
                  r.recall >= 0 ? num(r.recall).c_str() : "-", cal, dense, tps);
    std::string out = line;
    if (r.gate_timeouts > 0)  // those steps' times include the host's launch calls
        out.insert(out.size() - 1, "  (launch gate timed out in " + std::to_string(r.gate_timeouts) + " steps)");
    return out;
}

}  // namespace

void make_tiny(WaveRunOptions& o) {
    o.contexts = {2048}, o.batches = {1, 2}, o.layer.steps = 3, o.layer.kv_heads = 2;
    o.layer.head_dim = 64, o.layer.topics = 32;
    o.dense = {"tiny", 256, 4, 2, 64, 512}, o.layers = 2, o.dense_reps = 2;
}

std::vector<WaveRunRow> run_wave_vs_full(const GpuBackend& gpu, const WaveRunOptions& o,
                                         const std::function<void(const std::string&)>& progress) {
    std::vector<WaveRunRow> rows;
    std::unique_ptr<cuda::DenseLayer> dense;  // the layer outside attention, for every context's rows
    std::map<int, double> dense_us;           // its time per batch
    if (o.dense_layer) {
        std::string why = cuda::dense_unsupported();
        if (why.empty()) {
            try {  // a library that loads may still fail (cublasCreate): the rows go on without tokens/s
                dense = std::make_unique<cuda::DenseLayer>(o.dense, *std::max_element(o.batches.begin(), o.batches.end()));
            } catch (const std::exception& e) {
                why = e.what();
            }
        }
        if (!why.empty() && progress) progress("no dense layer, no tokens/s: " + why);
    }
    bool stopped = false;  // o.stop said so: no further row, the rows so far finished below
    for (int N : o.contexts) {
        if (stopped || (o.stop && o.stop())) break;
        SyntheticLayerParams lp = o.layer;
        lp.prompt = N;
        if (progress) progress("synthetic layer, context " + std::to_string(N));
        const std::vector<HeadSlice> heads = synthetic_layer(lp);
        std::vector<std::vector<HeadSlice>> others;  // the batch's other sequences: other seeds of the same layer
        std::vector<const HeadSlice*> more;
        for (int q = 1; q < o.sequences; ++q) {
            SyntheticLayerParams other = lp;
            other.seed = lp.seed + 1000u * (unsigned)q;
            others.push_back(synthetic_layer(other));
        }
        for (const auto& seq : others)
            for (const HeadSlice& h : seq) more.push_back(&h);
        // full attention's kernels, then wave's rows, each over every batch
        std::vector<Kind> kinds;
        if (o.full_library && gpu.library_unsupported(lp.head_dim, lp.group).empty())
            kinds.push_back({"full", "full", FullKernel::library});
        if (o.full_cudnn) {
            const std::string why = gpu.cudnn_unsupported(lp.head_dim, lp.group);
            if (why.empty()) kinds.push_back({"full-cudnn", "full", FullKernel::cudnn});
            else if (progress) progress("full-cudnn left out: " + why);
        }
        if (o.full_own || kinds.empty()) kinds.push_back({"full-own", "full", FullKernel::own});
        if (o.wave_host) kinds.push_back({"wave", "wave", FullKernel::library, false, false});
        if (o.wave_dev) kinds.push_back({"wave-dev", "wave", FullKernel::library, false, true});
        if (o.wave_ablation) {  // RetroInfer's Figure 15 on the device path: no cache, cache, cache + async update
            kinds.push_back({"wave-dev-nocache", "wave", FullKernel::library, false, true, false, true});
            kinds.push_back({"wave-dev-async", "wave", FullKernel::library, false, true, true});
        }
        if (o.wave_hbm) kinds.push_back({"wave-hbm", "wave", FullKernel::library, true, true});
        if (o.wave_hbm_host) kinds.push_back({"wave-hbm-host", "wave", FullKernel::library, true, false});
        if (o.quest) kinds.push_back({"quest", "quest"});
        if (o.pq) {  // offloaded through the block cache (PQCache's setting) and with its KV in HBM
            kinds.push_back({"pq", "pq"});
            kinds.push_back({"pq-hbm", "pq", FullKernel::library, true});
        }
        if (o.magicpig) kinds.push_back({"magicpig", "magicpig"});
        const size_t first_row = rows.size();
        // the shared indexes over the prompt (wave's, pq's), built once for every batch point and placement (in the GPU-only build the
        // host's part of a build is a BLAS-free loop per (sequence, KV head), side by side on the host's cores).
        // A batch B runs min(B, sequences) of the sequences (GpuLayerJob::sequences), so its index holds those
        // alone: batch 1's rows wait for one sequence's builds, not all of them (a lease's side runs, cut short
        // by their limits, still measure batch 1); the bigger batches' index is built once, when first needed.
        std::map<std::pair<std::string, int>, BuiltIndex> built;  // per (method, sequences): every kind and batch of it
        for (size_t k = 0; k < kinds.size() && !stopped; ++k) {
            const Kind& kind = kinds[k];
            const bool shared_build = find_gpu_method(kind.method)->shared_build;
            bool fits = true;
            for (size_t i = 0; i < o.batches.size() && fits; ++i) {
                if (o.stop && o.stop()) {
                    stopped = true;
                    if (progress) progress("stopped: no further row (a time budget or a stop signal)");
                    break;
                }
                const int B = o.batches[i];
                if (progress) progress(method_label(kind) + " N=" + std::to_string(N) + " B=" + std::to_string(B));
                WaveRunRow row;
                const auto failed = [&](const std::string& status) {  // this kind's row; its other batches not tried
                    row = WaveRunRow{};
                    row.method = method_label(kind);
                    row.context = N, row.batch = B, row.status = status;
                    fits = false;
                };
                const int used = std::max(1, std::min(o.sequences, B));  // the sequences batch B runs
                const std::vector<const HeadSlice*> more_used(more.begin(), more.begin() + (size_t)(used - 1) * heads.size());
                const auto key = std::make_pair(kind.method, used);
                try {
                    if (shared_build && !built.count(key)) {
                        if (progress) progress(kind.method + " index, context " + std::to_string(N));
                        const BuiltIndex& b = built.emplace(key, build_index(gpu, o, heads, more_used, kind.method)).first->second;
                        if (progress) {
                            char line[120];
                            std::snprintf(line, sizeof line, " index built in %.1f s (%d heads)", b.build_ms / 1e3,
                                          used * (int)heads.size());
                            progress(kind.method + line);
                        }
                    }
                    row = run_point(gpu, o, kind, heads, more_used, B, shared_build ? &built.at(key) : nullptr);
                } catch (const GpuMemoryError& e) {
                    failed(std::string("does not fit: ") + e.what());
                } catch (const cuda::StepGraphError& e) {  // a graph the device would not capture: that row, not the run
                    failed(std::string("step graph failed: ") + e.what());
                } catch (const std::exception& e) {
                    // a kind that fails (a kernel's launch, a library, a bad parameter) costs its own rows, not
                    // the rows measured before it; a device the failure left unusable (a kernel's fault is sticky)
                    // ends the run, which still reports what it measured
                    failed(std::string("failed: ") + e.what());
                    if (const std::string why = gpu.status(); !why.empty()) {
                        stopped = true;
                        if (progress) progress("the device is unusable after " + row.method + " failed (" + why + "): no further row");
                    }
                }
                rows.push_back(row);
                if (progress) {  // each row as it is measured: a run stopped by a time limit keeps its rows
                    std::string line = row_line(row);
                    line.pop_back();
                    progress(line);
                }
            }
        }
        set_speedups(rows, first_row);
        if (dense) {  // the layer outside attention at each batch, in the same run
            for (size_t i = first_row; i < rows.size(); ++i) {
                WaveRunRow& r = rows[i];
                if (r.status != "ok") continue;
                if (!dense_us.count(r.batch)) {
                    if (progress) progress("dense layer (" + o.dense.name + ") B=" + std::to_string(r.batch));
                    try {  // a failed GEMM costs the tokens/s column, not the rows measured
                        dense_us[r.batch] = time_dense(*dense, r.batch, o.dense_reps);
                    } catch (const std::exception& e) {
                        if (progress) progress(std::string("dense layer failed, no tokens/s from here: ") + e.what());
                        dense.reset();
                        break;
                    }
                }
                r.dense_us = dense_us[r.batch];
                r.tokens_per_s = r.batch / (o.layers * (r.measured.total_us() + r.dense_us) * 1e-6);
            }
        }
    }
    calibrate_phases(rows);
    return rows;
}

std::string wave_run_json(const std::vector<WaveRunRow>& rows) {
    std::ostringstream js;
    js << "[";
    for (size_t i = 0; i < rows.size(); ++i) {
        const WaveRunRow& r = rows[i];
        js << (i ? ",\n    " : "\n    ") << "{\"method\": " << json_quote(r.method) << ", \"context\": " << r.context
           << ", \"batch\": " << r.batch << ", \"status\": " << json_quote(r.status) << ", \"steps\": " << r.steps
           << ", \"step_us\": " << num(r.measured.step_us) << ", \"total_us\": " << num(r.measured.total_us())
           << ", \"select_us\": " << num(r.measured.select_us)
           << ", \"estimate_us\": " << num(r.measured.estimate_us)
           << ", \"gather_us\": " << num(r.measured.gather_us) << ", \"attend_us\": " << num(r.measured.attend_us)
           << ", \"host_us\": " << num(r.measured.host_us) << ", \"plan_us\": " << num(r.measured.plan_us) << ", \"admit_us\": " << num(r.measured.admit_us)
           << ", \"h2d_bytes\": " << num(r.h2d_bytes) << ", \"kv_bytes\": " << num(r.kv_bytes)
           << ", \"hbm_frac\": " << num(r.hbm_frac > 0 ? r.hbm_frac : NAN)
           << ", \"speedup_vs_full\": " << num(r.speedup > 0 ? r.speedup : NAN)
           << ", \"baseline\": " << json_quote(r.baseline)
           << ", \"replica_diff\": " << num(r.replica_diff) << ", \"out_err\": " << num(r.out_err < 0 ? NAN : r.out_err)
           << ", \"recall@100\": " << num(r.recall < 0 ? NAN : r.recall)
           << ", \"launch_gate\": " << (r.launch_gate ? "true" : "false") << ", \"gate_timeouts\": " << r.gate_timeouts
           << ", \"step_graph\": " << (r.step_graph ? "true" : "false") << ", \"graph_us\": " << num(r.measured.graph_us)
           << ", \"index_bytes\": " << num(r.index_bytes);
        if (r.dense_us > 0)
            js << ", \"dense_us\": " << num(r.dense_us) << ", \"tokens_per_s\": " << num(r.tokens_per_s);
        if (r.cal_step_us > 0)
            js << ", \"cal_model_step_us\": " << num(r.cal_step_us) << ", \"cal_model_select_us\": " << num(r.cal_select_us)
               << ", \"cal_model_attend_us\": " << num(r.cal_attend_us) << ", \"calibration_point\": "
               << (r.calibration_point ? "true" : "false") << ", \"measured_over_cal_model\": "
               << num(r.measured.step_us / r.cal_step_us);
        if (r.modeled)
            js << ", \"model_step_us\": " << num(r.model_step_us) << ", \"model_select_us\": " << num(r.model_select_us)
               << ", \"model_h2d_us\": " << num(r.model_h2d_us) << ", \"model_attend_us\": " << num(r.model_attend_us)
               << ", \"measured_over_model\": " << num(r.model_step_us > 0 ? r.measured.step_us / r.model_step_us : NAN);
        js << "}";
    }
    js << "\n  ]";
    return js.str();
}

std::string wave_run_text(const std::vector<WaveRunRow>& rows) {
    std::string t = row_header();
    for (const WaveRunRow& r : rows) t += row_line(r);
    return t;
}

HardwareSpec read_hardware_values(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw Error("hardware values: cannot read " + path);
    HardwareSpec hw;
    std::string line;
    for (int no = 1; std::getline(in, line); ++no) {
        std::istringstream ls(line);
        std::string key;
        if (!(ls >> key) || key[0] == '#') continue;
        if (key == "name") {
            ls >> hw.name;
            continue;
        }
        double x = 0;
        double* field = hardware_field(hw, key);
        if (!field || !(ls >> x) || !(x > 0))
            throw Error(path + ":" + std::to_string(no) + ": expected '<field> <positive number>' with a field of " +
                        "configs/hardware/*.json, got '" + line + "'");
        *field = x;
    }
    return hw;
}

}  // namespace retro::gpu_run
