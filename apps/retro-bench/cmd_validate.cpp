// `retro-bench validate FILE...`: check configs (.json) or traces without running anything.
#include <fmt/format.h>

#include "bench/config.hpp"
#include "bench/cuda_runner.hpp"
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

const CommandRegistrar reg(40, [](CLI::App& app) {
    auto files = std::make_shared<std::vector<std::string>>();
    auto popt = std::make_shared<PreflightOptions>();
    auto* sub = app.add_subcommand("validate", "Check configs (.json) and traces (HDF5) without running");
    sub->add_option("files", *files, "config or trace files")->required();
    sub->add_option("--threads", popt->threads, "worker threads `run` would use (memory estimate; default: config)");
    sub->add_option("--max-memory", popt->max_memory,
                    "memory limit for the estimate, e.g. 8G (default: the available memory)");
    return std::function<int()>([files, popt] {
        int bad = 0;
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
