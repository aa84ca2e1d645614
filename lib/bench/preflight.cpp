#include "bench/preflight.hpp"

#include <algorithm>
#include <string>
#include <thread>

#include "bench/measured_hardware.hpp"
#include "core/error.hpp"
#include "methods/params.hpp"
#include "trace/memory_estimates.hpp"

namespace retro {

Preflight check_before_work(const RunConfig& cfg, const std::vector<PreparedTrace>& traces,
                            const PreflightOptions& opt) {
    // configs/hardware/; "measured" is known only once the device is measured (the runner does it): its
    // profile is the default GPU's here, for the checks that read a profile
    Preflight pf{load_hardware_profile(cfg.hardware == kMeasuredHardware ? "h100-sxm-pcie5" : cfg.hardware), {},
                 memory_limit(opt.max_memory)};
    for (const auto& t : traces)
        for (const auto& r : cfg.runs) {
            const MethodInfo& m = find_method(r.method);
            if (!m.check_trace) continue;
            try {
                m.check_trace(r.params, t.info);
            } catch (const ParamError& e) {
                throw ParamError(t.spec.path + ": run " + r.label() + ": " + e.what());
            }
        }
    size_t jobs = 0;
    for (const auto& t : traces) {
        jobs += t.layers.size() * t.kv_heads.size();
        if (!t.needs_synth) continue;
        const MemoryEstimate gen = estimate_synth_memory(SynthParams::from_json(t.spec.synth), t.spec.path);
        check_memory(gen, pf.limit);
        if (gen.bytes > pf.memory.bytes) pf.memory = gen;
    }
    const MemoryEstimate run = estimate_run_memory(cfg, traces, run_threads(cfg, opt.threads, jobs));
    check_memory(run, pf.limit);
    if (run.bytes >= pf.memory.bytes) pf.memory = run;
    return pf;
}

int run_threads(const RunConfig& cfg, int threads, size_t jobs) {
    int n = threads >= 0 ? threads : cfg.threads;
    if (n <= 0) n = (int)std::max(1u, std::thread::hardware_concurrency());
    return std::min<int>(n, (int)std::max<size_t>(1, jobs));
}

MemoryEstimate estimate_run_memory(const RunConfig& cfg, const std::vector<PreparedTrace>& traces, int threads) {
    MemoryEstimate est;
    double worst = 0;
    int in_flight = 1;
    std::string worst_what;
    for (const auto& t : traces) {
        if (t.steps.empty()) continue;
        const TraceInfo& info = t.info;
        const int steps_read = t.steps.back() + 1;  // the runner reads up to the last selected step
        const double slice = head_slice_bytes(info, steps_read, true);
        // Evaluator: scores and softmax weights over the visible tokens for each query head of the group
        const double reference = 2.0 * info.group_size() * ((double)info.prompt_len + steps_read) * 4.0;
        double methods = 0;
        for (const auto& r : cfg.runs) {
            const MethodInfo& m = find_method(r.method);
            const double b = m.index_bytes ? m.index_bytes(r.params, info)
                                           : (double)info.prompt_len * info.head_dim * 4.0;  // a float32 key copy
            // cpu: every run of a head is built and held at once (run_head); cuda: one point at a time, its
            // first sequence's index per head (a batch's further copies are checked by the point's run, which
            // skips a batch that does not fit in host memory as one that does not fit in GPU memory)
            methods = cfg.backend == "cuda" ? std::max(methods, b) : methods + b;
        }
        const double per_head = slice + reference + methods;
        // one layer at a time on the GPU, with cuda.sequences layers' slices (the batch's other sequences) and
        // their shared indexes
        const int heads = cfg.backend == "cuda" ? (int)t.kv_heads.size() * std::max(1, cfg.cuda.sequences) : threads;
        if (per_head * heads > worst * in_flight) {
            worst = per_head;
            in_flight = heads;
            worst_what = "trace " + t.spec.path + ": " + std::to_string(info.prompt_len + steps_read) +
                         " tokens x head_dim " + std::to_string(info.head_dim) + ": slice " + format_bytes(slice) +
                         " + reference " + format_bytes(reference) + " + " + (cfg.backend == "cuda" ? std::string("the largest method index ")
                                                      : std::to_string(cfg.runs.size()) + " method instance(s) ") +
                         format_bytes(methods);
        }
    }
    est.bytes = worst * in_flight;
    est.what = "run '" + cfg.name + "': " + std::to_string(in_flight) + " head(s) in flight x " +
               format_bytes(worst) + " per head (" + worst_what + ")";
    est.advice = cfg.backend == "cuda"
                     ? "select fewer KV heads (\"kv_heads\"), fewer decode steps or a shorter trace"
                     : "run fewer heads at once (--threads 1 needs about " + format_bytes(worst) +
                           "), split the methods over several configs, or use fewer decode steps or a shorter "
                           "trace";
    return est;
}

}  // namespace retro
