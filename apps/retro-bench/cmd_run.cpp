// `retro-bench run CONFIG.json`: run a sweep, write results/<name>/, print the summary table.
#include <fmt/format.h>

#include <atomic>
#include <csignal>
#include <cstdio>

#include "bench/config.hpp"
#include "bench/runner.hpp"
#include "bench/shard.hpp"
#include "bench/summary.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"
#include "closed_loop_cmd.hpp"
#include "core/interrupted.hpp"
#include "core/json_file.hpp"
#include "ood_recall_cmd.hpp"
#ifdef RETRO_HAVE_CUDA
#include "run/cuda_backend.hpp"
#endif
#ifdef RETRO_HAVE_PYTHON_METHODS
#include "py_interrupt.hpp"
#endif

namespace retro::cli {
namespace {

// SIGINT (Ctrl-C) and SIGTERM (kill, a scheduler's time limit) both stop the run after the heads in
// flight; the exit code is 128 + the signal (130, 143), as if the signal had killed the process.
std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};
extern "C" void on_stop_signal(int sig) {
    g_signal = sig;
    g_stop = true;
    std::signal(SIGINT, SIG_DFL);  // a second signal kills immediately
    std::signal(SIGTERM, SIG_DFL);
}
int stopped_exit_code() { return 128 + (g_signal.load() ? g_signal.load() : SIGINT); }

// Single-quotes an argument for the recorded command and the resume hint when the shell would split it.
std::string shell_arg(const std::string& s) {
    if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./-_") ==
                          std::string::npos)
        return s;
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

std::string hms(double s) {
    if (s < 0) return "--:--";
    const long t = (long)(s + 0.5);
    return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                     : fmt::format("{:02}:{:02}", t / 60, t % 60);
}

// `--shard-plan N`: the units and estimated cost of every shard, from the traces' metadata (or a synth
// recipe's shape) alone.
void print_shard_plan(const RunConfig& cfg, int n) {
    const auto traces = prepare_traces(cfg, false);
    const auto units = sweep_units(cfg, traces, cfg.backend == "cuda");
    const auto owner = assign_shards(units, n);
    std::vector<uint64_t> load((size_t)n, 0);
    std::vector<size_t> count((size_t)n, 0);
    uint64_t total = 0;
    for (size_t i = 0; i < units.size(); ++i) {
        load[(size_t)owner[i]] += units[i].cost;
        ++count[(size_t)owner[i]];
        total += units[i].cost;
    }
    fmt::print("{}: {} units, estimated cost {:.4g} (tokens x method weight, docs/cluster.md)\n", cfg.name,
               units.size(), (double)total);
    uint64_t slowest = 0;
    for (int s = 0; s < n; ++s) {
        fmt::print("  shard {}/{}: {} units, cost {:.4g} ({:.1f}%)\n", s, n, count[(size_t)s], (double)load[(size_t)s],
                   total ? 100.0 * (double)load[(size_t)s] / (double)total : 0.0);
        slowest = std::max(slowest, load[(size_t)s]);
    }
    fmt::print("estimated balance (slowest / mean shard): {:.3f}\n",
               total ? (double)slowest * n / (double)total : 1.0);
}

struct RunArgs {
    std::string config;
    std::string results = "results";
    bool resume = false, force = false, quiet = false, wait_lock = false;
    int threads = -1;
    std::string shard;  ///< "I/N" (docs/cluster.md)
    int shard_plan = 0;  ///< print the assignment for this many shards and exit
    std::string max_memory;
    std::string only_kind;  ///< closed-loop configs: only the cases of this kind (fidelity, niah, task)
    std::string device;     ///< closed-loop configs: where the model runs (cpu, cuda); empty = cpu

    /// The command as given (every option that changes what or where it runs), for the manifest.
    std::string command_line() const {
        std::string c = "retro-bench run " + shell_arg(config);
        if (results != "results") c += " --results " + shell_arg(results);
        if (resume) c += " --resume";
        if (force) c += " --force";
        if (threads >= 0) c += " --threads " + std::to_string(threads);
        if (quiet) c += " -q";
        if (!shard.empty()) c += " --shard " + shard;
        if (wait_lock) c += " --wait-lock";
        if (!max_memory.empty()) c += " --max-memory " + max_memory;
        if (!only_kind.empty()) c += " --only-kind " + only_kind;
        if (!device.empty()) c += " --device " + device;
        return c;
    }
    /// The command that continues an interrupted run.
    std::string resume_command() const {
        return "retro-bench run " + shell_arg(config) + " --resume" +
               (results != "results" ? " --results " + shell_arg(results) : std::string()) +
               (shard.empty() ? std::string() : " --shard " + shard);
    }
};

const CommandRegistrar reg(10, [](CLI::App& app) {
    auto a = std::make_shared<RunArgs>();
    auto* sub = app.add_subcommand("run", "Run a config: methods x parameter grid over traces; writes results/<name>/");
    sub->add_option("config", a->config, "run configuration (JSON)")->required();
    sub->add_option("--results", a->results, "results root directory")->capture_default_str();
    sub->add_flag("--resume", a->resume, "continue an existing results directory, skipping finished heads");
    sub->add_flag("--force", a->force, "delete an existing results directory first");
    sub->add_option("--threads", a->threads, "worker threads over heads (0 = all cores; default: config)");
    sub->add_option("--shard", a->shard, "run only shard I of N (I/N, counted from 0) of the sweep's units "
                    "into the shared results directory; the last shard to finish merges (docs/cluster.md); a closed-loop "
                    "config: the I-th of N groups of cases, every run (docs/closed-loop.md)");
    sub->add_option("--shard-plan", a->shard_plan, "print how N shards would split the sweep (units and "
                    "estimated cost per shard) and exit; nothing is generated or run; a closed-loop config: each "
                    "shard's cases and what of them is still to do in the results directory")->check(CLI::Range(1, 100000));
    sub->add_option("--only-kind", a->only_kind,
                    "a closed-loop config: run only its cases of this kind (the directory stays partial; a "
                    "last run without it writes runs.jsonl; docs/closed-loop.md)")
        ->check(CLI::IsMember({"fidelity", "niah", "task"}));
    sub->add_option("--device", a->device,
                    "a closed-loop config: where the model's forward runs, cpu (default) or cuda (torch's first "
                    "GPU); the methods run on the host through the binding either way (docs/closed-loop.md)")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    sub->add_flag("-q,--quiet", a->quiet, "no progress output");
    sub->add_option("--max-memory", a->max_memory,
                    "refuse to start when the estimated memory exceeds this, e.g. 8G (default: the available memory)");
    sub->add_flag("--wait-lock,--wait", a->wait_lock,
                  "wait for the writers holding the results directory (a run, its model process) to finish (default: refuse to start, naming them)");
    sub->callback([] {});
    return std::function<int()>([a, &app] {
        if (a->resume && a->force) throw ConfigError("--resume and --force exclude each other");
        const ShardSpec shard = a->shard.empty() ? ShardSpec{} : parse_shard(a->shard);
        if (file_exists(a->config)) {  // "experiment": "ood-recall" configs run the ood-recall command
            const nlohmann::json j = read_json_file(a->config);  // strict, as load_config
            if (!a->only_kind.empty() && !is_closed_loop_config(j))
                throw ConfigError(a->config + ": --only-kind selects a closed-loop config's cases; this is not an "
                                  "\"experiment\": \"closed-loop\" config");
            if (!a->device.empty() && !is_closed_loop_config(j))
                throw ConfigError(a->config + ": --device places a closed-loop config's model; this is not an "
                                  "\"experiment\": \"closed-loop\" config (a replay config's GPU path is its "
                                  "\"backend\": \"cuda\")");
            if (!a->max_memory.empty() && (is_ood_recall_config(j) || is_closed_loop_config(j)))
                throw ConfigError(a->config + ": --max-memory applies to replay sweeps (the runner's estimate of its "
                                  "heads' memory); this is an \"experiment\": \"" +
                                  (is_ood_recall_config(j) ? "ood-recall" : "closed-loop") + "\" config");
            if (is_ood_recall_config(j) && (shard.active() || a->shard_plan > 0))
                throw ConfigError(a->config + ": " + (shard.active() ? "--shard" : "--shard-plan") +
                                  " applies to method sweeps; an \"experiment\": \"ood-recall\" config runs on one "
                                  "machine");
            if (is_ood_recall_config(j))
                return run_ood_config(j, a->config,
                                      OodConfigRun{.results_root = a->results, .resume = a->resume,
                                                   .force = a->force, .wait_lock = a->wait_lock,
                                                   .threads = a->threads, .quiet = a->quiet});
            if (is_closed_loop_config(j))  // the Python side over the binding (closed_loop_config.cpp)
                return run_closed_loop_config(j, a->config,
                                              ClosedLoopRun{.results_root = a->results, .resume = a->resume,
                                                            .force = a->force, .wait_lock = a->wait_lock,
                                                            .shard = a->shard,
                                                            .shard_plan = a->shard_plan, .quiet = a->quiet,
                                                            .threads = a->threads, .only_kind = a->only_kind,
                                                            .device = a->device,
                                                            .command_line = a->command_line()});
        }
        const RunConfig cfg = load_config(a->config);
        if (a->shard_plan > 0) {
            print_shard_plan(cfg, a->shard_plan);
            return 0;
        }
        RunnerOptions opt;
        opt.results_root = a->results;
        opt.resume = a->resume;
        opt.force = a->force;
        opt.threads = a->threads;
        opt.shard = shard;
        opt.max_memory = a->max_memory;
        opt.config_path = a->config;
        opt.wait_lock = a->wait_lock;
        opt.command_line = a->command_line();
        opt.stop = &g_stop;
#ifdef RETRO_HAVE_CUDA
        const auto gpu = gpu_run::make_cuda_backend();  // used by "backend": "cuda" configs only
        opt.gpu = gpu.get();
#endif
        const bool tty = stderr_is_tty();
        opt.on_note = [](const std::string& s) { fmt::print(stderr, "{}\n", s); };
        int last_line = -1;
        if (!a->quiet)
            opt.on_progress = [tty, &last_line, unit = cfg.backend == "cuda" ? "layers" : "heads"](const RunProgress& p) {
                const int total = std::max(1, p.total);
                if (tty) {
                    const int width = 30, filled = p.done * width / total;
                    fmt::print(stderr, "\r[{}{}] {}/{} {}{}  {} elapsed  ETA {}   ", std::string(filled, '='),
                               std::string(width - filled, ' '), p.done, p.total, unit,
                               p.skipped ? fmt::format(" (+{} resumed)", p.skipped) : "", hms(p.elapsed_s),
                               hms(p.eta_s));
                    if (p.done == p.total) fmt::print(stderr, "\n");
                    std::fflush(stderr);
                } else {
                    const int decile = p.done * 10 / total;
                    if (decile != last_line || p.done == p.total) {
                        last_line = decile;
                        fmt::print(stderr, "progress: {}/{} {} ({} resumed) elapsed {} eta {}\n", p.done,
                                   p.total, unit, p.skipped, hms(p.elapsed_s), hms(p.eta_s));
                    }
                }
            };
        fmt::print(stderr, "{}: {} run(s) x {} trace(s){}\n", cfg.name, cfg.runs.size(), cfg.traces.size(),
                   shard.active() ? ", shard " + shard.str() : "");
        std::signal(SIGINT, on_stop_signal);
        std::signal(SIGTERM, on_stop_signal);
#ifdef RETRO_HAVE_PYTHON_METHODS
        retro::pym::interrupt_calls_on(&g_stop);  // a Python method mid-call stops too (issue 43 #4)
#endif
        RunOutcome out;
        try {
            out = run_config(cfg, opt);
        } catch (const Interrupted& e) {  // stopped while generating a trace: nothing to resume yet
            fmt::print(stderr, "interrupted: {}; run the same command again to start over\n", e.what());
            return stopped_exit_code();
        }
        std::signal(SIGINT, SIG_DFL);
        std::signal(SIGTERM, SIG_DFL);
        if (!shard.active() || out.merged) {
            fmt::print("{}", summary_table(out.records));
            fmt::print("\nresults: {}/ (runs.jsonl, per_head.csv, manifest.json)\n", out.dir);
        }
        if (out.interrupted) {
            fmt::print(stderr, "interrupted: {} head(s) done this session; continue with: {}\n", out.heads_run,
                       a->resume_command());
            return stopped_exit_code();
        }
        if (!out.failed.empty()) {  // the cuda backend's failed runs: the others' records stand, these are missing
            fmt::print(stderr, "failed: {} run(s) of the GPU (listed in the manifest; try them again with {}):\n",
                       out.failed.size(), a->resume_command());
            for (const std::string& f : out.failed) fmt::print(stderr, "  {}\n", f);
            return 1;
        }
        (void)app;
        return 0;
    });
});

}  // namespace
}  // namespace retro::cli
