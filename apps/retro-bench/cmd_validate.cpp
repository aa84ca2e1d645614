// `retro-bench validate FILE...`: check configs (.json) or traces without running anything;
// `validate --results DIR`: list a results directory's damaged part files (docs/results.md).
#include <fmt/format.h>

#include "bench/config.hpp"
#include "bench/cuda_runner.hpp"
#include "bench/damaged_parts.hpp"
#include "bench/preflight.hpp"
#include "bench/runner.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"
#include "closed_loop_cmd.hpp"
#include "core/json_file.hpp"
#include "ood_recall_cmd.hpp"
#include "trace/reader.hpp"
#ifdef RETRO_HAVE_CUDA
#include "run/cuda_backend.hpp"
#endif

namespace retro::cli {
namespace {

void validate_config(const std::string& path, const PreflightOptions& popt) {
    if (file_exists(path)) {  // "experiment": "ood-recall" configs (lib/analysis/ood_recall_config.hpp)
        const nlohmann::json j = read_json_file(path);  // strict, as load_config
        if (is_ood_recall_config(j)) {
            run_ood_config(j, path, OodConfigRun{.validate_only = true});
            return;
        }
        if (is_closed_loop_config(j)) {
            run_closed_loop_config(j, path, ClosedLoopRun{.validate_only = true});
            return;
        }
    }
    const RunConfig cfg = load_config(path);
    const auto traces = prepare_traces(cfg, false);
    const Preflight pf = check_before_work(cfg, traces, popt);  // every check `run` makes before work
    fmt::print("{}: OK config '{}': {} run(s)\n", path, cfg.name, cfg.runs.size());
    for (const auto& r : cfg.runs) fmt::print("  {}\n", r.label());
    for (const auto& t : traces)
        fmt::print("  trace {}{}: {} layer(s) x {} KV head(s) x {} step(s)\n", t.spec.path,
                   t.generation_note(), t.layers.size(),
                   t.kv_heads.size(), t.steps.size());
    fmt::print("  memory: about {} ({}), limit {}\n", format_bytes(pf.memory.bytes), pf.memory.what,
               pf.limit.bytes > 0 ? format_bytes(pf.limit.bytes) + " (" + pf.limit.source + ")" : "unknown");
    if (cfg.backend != "cuda") return;
#ifdef RETRO_HAVE_CUDA
    const auto gpu = gpu_run::make_cuda_backend();
    for (const auto& t : traces) check_cuda_trace(t, cfg, *gpu);  // shapes and KV dtype: no device needed
    const std::string why = gpu->status();
    fmt::print("  backend cuda: {}\n", why.empty() ? "device " + gpu->device_name() : "no usable device here (" + why + ")");
#else
    fmt::print("  backend cuda: this retro-bench was built without CUDA\n");
#endif
}

void validate_trace(const std::string& path) {
    TraceReader r(path);
    const TraceInfo& info = r.info();
    // Full check: read every head (shapes were checked at open; this checks values for NaN/Inf).
    for (int l : info.layers)
        for (int h = 0; h < info.num_kv_heads; ++h) r.read_head(l, h);
    fmt::print("{}: OK trace: {} layer(s), {} q / {} kv heads, head_dim {}, prompt {} + {} steps, {}\n", path,
               info.layers.size(), info.num_q_heads, info.num_kv_heads, info.head_dim, info.prompt_len,
               info.num_decode_steps, dtype_name(info.dtype));
}

/// Lists the damaged part files of a results directory (bench/damaged_parts.hpp), one line each; changes
/// nothing. Returns how many are damaged.
size_t validate_results(const std::string& dir) {
    const PartsScan scan = scan_results_parts(dir);
    for (const auto& d : scan.damaged) fmt::print("{}: damaged ({})\n", d.path, d.damage);
    const std::string what = fmt::format("{} part file(s) checked ({})", scan.checked,
                                         scan.closed_loop ? "closed-loop" : "open-loop");
    if (scan.damaged.empty()) fmt::print("{}: OK results: {}, none damaged\n", dir, what);
    else
        fmt::print("{}: {}, {} damaged; `retro-bench run CONFIG --resume` moves each aside (to NAME.damaged) and "
                   "recomputes its unit\n", dir, what, scan.damaged.size());
    return scan.damaged.size();
}

const CommandRegistrar reg(40, [](CLI::App& app) {
    auto files = std::make_shared<std::vector<std::string>>();
    auto results = std::make_shared<std::string>();
    auto popt = std::make_shared<PreflightOptions>();
    auto* sub = app.add_subcommand("validate", "Check configs (.json) and traces (HDF5), or a results directory's "
                                               "part files (--results), without running");
    sub->add_option("files", *files, "config or trace files");
    sub->add_option("--results", *results,
                    "a results directory (<results root>/<config name>): list its damaged part files, exit 2 if any");
    sub->add_option("--threads", popt->threads, "worker threads `run` would use (memory estimate; default: config)");
    sub->add_option("--max-memory", popt->max_memory,
                    "memory limit for the estimate, e.g. 8G (default: the available memory)");
    return std::function<int()>([files, results, popt] {
        if (files->empty() && results->empty())
            throw Error("validate: nothing to check: give config or trace files, or --results DIR");
        int bad = 0;
        if (!results->empty()) {
            try {
                bad += validate_results(*results) > 0;
            } catch (const Error& e) {
                fmt::print(stderr, "{}: INVALID: {}\n", *results, e.what());
                ++bad;
            }
        }
        for (const auto& f : *files) {
            try {
                if (f.size() >= 5 && f.substr(f.size() - 5) == ".json") validate_config(f, *popt);
                else validate_trace(f);
            } catch (const Error& e) {
                fmt::print(stderr, "{}: INVALID: {}\n", f, e.what());
                ++bad;
            }
        }
        return bad ? 2 : 0;
    });
});

}  // namespace
}  // namespace retro::cli
