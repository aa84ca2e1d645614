// `retro-bench run CONFIG` for "experiment": "closed-loop" configs (configs/closedloop/*.json,
// docs/closed-loop.md): checks, then retro_bench.closedloop.closed_loop in the dump venv.
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "bench/config.hpp"
#include "bench/results_lock.hpp"
#include "bench/shard.hpp"
#include "closed_loop_cmd.hpp"
#include "core/child_process.hpp"
#include "core/error.hpp"
#include "core/host.hpp"
#include "core/json_keys.hpp"
#include "spawn.hpp"

namespace retro::cli {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

/// A venv's directory: $`var`, else ${XDG_CACHE_HOME:-~/.cache}/retro-bench/`name`.
std::string venv_dir(const char* var, const char* name) {
    if (const char* e = std::getenv(var); e && *e) return e;
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    return (xdg && *xdg ? std::string(xdg) : std::string(home ? home : "") + "/.cache") + "/retro-bench/" + name;
}

/// The closed loop's interpreter: $RETRO_CLOSED_LOOP_PYTHON, else for --device cuda the GPU venv
/// (PyPI's CUDA torch; `scripts/dump/setup_venv.sh --cuda`: $RETRO_DUMP_VENV_CUDA or .../dump-venv-cuda)
/// when it exists, else the trace dumper's venv (Debian's CPU torch; scripts/dump/setup_venv.sh:
/// $RETRO_DUMP_VENV or ${XDG_CACHE_HOME:-~/.cache}/retro-bench/dump-venv; the script then says that its
/// torch has no CUDA).
std::string closed_loop_python(const std::string& device) {
    if (const char* e = std::getenv("RETRO_CLOSED_LOOP_PYTHON"); e && *e) return e;
    if (device == "cuda") {
        const std::string py = venv_dir("RETRO_DUMP_VENV_CUDA", "dump-venv-cuda") + "/bin/python";
        if (fs::exists(py)) return py;
    }
    return venv_dir("RETRO_DUMP_VENV", "dump-venv") + "/bin/python";
}

}  // namespace

bool is_closed_loop_config(const json& j) {
    return j.is_object() && j.contains("experiment") && j["experiment"].is_string() &&
           j["experiment"].get<std::string>() == "closed-loop";
}

int run_closed_loop_config(const json& j, const std::string& origin, const ClosedLoopRun& opt) {
    check_keys(j, {"name", "experiment", "description", "figure", "model", "dense_layers", "prefill_queries",
                   "prefill_chunk", "storage", "threads", "seed", "allow_beyond_context", "only_where_reference_answers",
                   "fidelity", "niah", "cases", "methods", "open_loop"},
               origin);
    if (opt.resume && opt.force) throw ConfigError("--resume and --force exclude each other");
    if (!j.contains("model") || !j["model"].is_string())
        throw ConfigError(origin + ": missing \"model\" (smollm2, FILE.gguf, a Hugging Face directory or "
                                   "tiny-random-llama)");
    // The name and the methods go through the run-config parser (same checks, same expansion of the
    // parameter grids, defaults filled from the registry), with a placeholder trace: none is read.
    // "methods": [] runs the full-attention reference alone (the model's own accuracy, where a grid's
    // cases are chosen: issue 27 #2); the name still goes through the parser with a stand-in method.
    const bool reference_only = j.contains("methods") && j["methods"].is_array() && j["methods"].empty();
    json base = {{"name", j.value("name", "")}, {"traces", json::array({"(closed loop: no trace)"})}};
    if (reference_only)
        base["methods"] = json::array({{{"name", "full"}}});
    else if (j.contains("methods"))
        base["methods"] = j["methods"];
    const RunConfig cfg = parse_config(base, origin);
    json runs = json::array();
    if (!reference_only)
        for (const auto& r : cfg.runs) runs.push_back({{"method", r.method}, {"params", r.params}, {"label", r.label()}});
    fmt::print(stderr, "{}: closed loop on {}, {} run(s) + the full-attention reference\n", cfg.name,
               j["model"].get<std::string>(), runs.size());
    if (opt.validate_only) {
        fmt::print("{}: OK closed-loop config '{}': {} run(s)\n", origin, cfg.name, runs.size());
        for (const auto& r : runs) fmt::print("  {}\n", r["label"].get<std::string>());
        return 0;
    }
    const std::string py = closed_loop_python(opt.device);
    // the package beside this binary (build/python/retro_bench: the compiled core the closed loop needs)
    const std::string module = "retro_bench.closedloop.closed_loop";
    std::vector<std::string> args = python_module_command(py, module);
    const std::string command = !opt.command_line.empty() ? opt.command_line : "retro-bench run " + origin;
    args.insert(args.end(), {origin, "--runs-json", runs.dump(), "--results", opt.results_root, "--command", command,
                             "--retro-bin", (fs::path(exe_dir()) / "retro-bench").string()});
    if (opt.resume) args.push_back("--resume");
    if (opt.force) args.push_back("--force");
    if (!opt.shard.empty()) args.insert(args.end(), {"--case-shard", opt.shard});
    if (opt.threads > 0) args.insert(args.end(), {"--threads", std::to_string(opt.threads)});
    if (!opt.only_kind.empty()) args.insert(args.end(), {"--only-kind", opt.only_kind});
    if (!opt.device.empty()) args.insert(args.end(), {"--device", opt.device});
    if (opt.quiet) args.push_back("--quiet");
    ChildOptions child{.what = "Python interpreter",
                       .hint = "the closed loop runs in the trace dumper's venv: bash scripts/dump/setup_venv.sh, "
                               "or set RETRO_CLOSED_LOOP_PYTHON"};
    if (opt.shard_plan > 0) {  // reads the results directory only: no lock, nothing created
        args.insert(args.end(), {"--shard-plan", std::to_string(opt.shard_plan)});
        return run_child(args, child);
    }
    // One writer per results directory (issue 43): the directory's lock is taken here and inherited by the
    // model process, which holds it with us (and passes it to its own writers): it is free only when no
    // writer lives. A shard of the cases or one kind of them runs beside the others (shared lock plus its
    // own), as shards of a replay sweep do.
    ResultsLockRequest lock_req;
    lock_req.wait = opt.wait_lock;
    lock_req.command = command;
    if (!opt.shard.empty()) {
        const ShardSpec s = parse_shard(opt.shard);
        lock_req.shard_index = s.index;
        lock_req.shard_count = s.count;
    }
    lock_req.part = opt.only_kind;
    lock_req.on_wait = [](const std::string& s) { fmt::print(stderr, "{}\n", s); };
    const std::string dir = (fs::path(opt.results_root) / cfg.name).string();
    std::error_code ec;
    const bool existed = fs::exists(dir, ec);
    ResultsLock lock(dir, lock_req);
    if (opt.force && lock.exclusive()) clear_locked_dir(lock);  // the lock files stay: the child holds them
    clean_temp_files(lock);
    // RETRO_HOST_JSON: this binary's host_info() (git revision, BLAS, CPU, version), for the runner's manifest
    // "host" as an open-loop run records it (the report's header reads git_revision and blas there)
    // RETRO_RESULTS_LOCK: which lock this process holds, so that the model process can tell a session
    // recorded as running whose process is gone (closedloop/results.py: marked stale, as the runner does)
    const json held = {{"lock", lock.holder().lock}, {"exclusive", lock.exclusive()}};
    child.env_set = {{"RETRO_HOST_JSON", host_info().dump()}, {"RETRO_RESULTS_LOCK", held.dump()}};
    child.inherit_fds = lock.fds();
    child.on_started = [&](long pid) { lock.add_writer(pid, "closed loop: " + py + " -m " + module); };
    const int rc = run_child(args, child);
    if (!existed && lock.exclusive() && holds_only_lock_files(dir))
        fs::remove_all(dir, ec);  // refused before anything was written (bad input): no empty directory left
    return rc;
}

}  // namespace retro::cli
