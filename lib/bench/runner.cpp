#include "bench/runner.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "bench/assemble.hpp"
#include "bench/cuda_runner.hpp"
#include "bench/damaged_parts.hpp"
#include "bench/head_run.hpp"
#include "bench/merge.hpp"
#include "bench/preflight.hpp"
#include "bench/results.hpp"
#include "bench/results_lock.hpp"
#include "bench/measured_hardware.hpp"
#include "core/error.hpp"
#include "core/interrupted.hpp"
#include "core/fs.hpp"
#include "core/hash.hpp"
#include "core/host.hpp"
#include "methods/params.hpp"
#include "metrics/evaluator.hpp"
#include "metrics/metrics.hpp"
#include "system/head_system.hpp"
#include "trace/fingerprint.hpp"
#include "trace/reader.hpp"
#include "trace/synth.hpp"

namespace retro {

using json = nlohmann::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {
std::vector<int> select_or_all(const std::vector<int>& chosen, const std::vector<int>& available,
                               const std::string& what, const std::string& path) {
    if (chosen.empty()) return available;
    for (int x : chosen)
        if (std::find(available.begin(), available.end(), x) == available.end()) {
            std::string av;
            for (int a : available) av += (av.empty() ? "" : ",") + std::to_string(a);
            throw ConfigError(path + ": config selects " + what + " " + std::to_string(x) +
                              " but the trace has " + what + "s {" + av + "}");
        }
    return chosen;
}
std::vector<int> iota_vec(int n) {
    std::vector<int> v((size_t)n);
    for (int i = 0; i < n; ++i) v[(size_t)i] = i;
    return v;
}
double secs_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}
/// True when a file that `retro-bench synth` made (`have`: its source attribute, which records every
/// parameter) comes from other parameters than the recipe (`want`: another recipe, or a generator
/// version whose presets or parameters changed). A file that retro-bench synth did not make is an error,
/// never overwritten.
bool synth_file_is_stale(const std::string& path, const std::string& have, const std::string& want) {
    if (have == want) return false;
    if (have.rfind("synthetic:retro-synth", 0) != 0)
        throw ConfigError(path + ": the config gives a \"synth\" recipe for it, but the file was not made by "
                          "retro-bench synth (source '" + have + "'); remove the recipe or move the file");
    return true;
}

}  // namespace

std::vector<PreparedTrace> prepare_traces(const RunConfig& cfg, bool generate_missing,
                                          const std::function<void(const std::string&)>& note,
                                          const std::atomic<bool>* stop) {
    std::vector<PreparedTrace> out;
    std::map<std::string, std::string> seen;  // canonical path -> the spelling listed first
    for (const auto& spec : cfg.traces) {
        // One file under two spellings ("a/../a/t.h5", a symlink) would run twice: compare canonical paths.
        std::error_code ec;
        fs::path canon = fs::weakly_canonical(fs::absolute(spec.path, ec), ec);
        if (ec) canon = fs::path(spec.path).lexically_normal();
        if (auto [it, fresh] = seen.emplace(canon.string(), spec.path); !fresh)
            throw ConfigError(it->second == spec.path
                                  ? "trace listed twice: " + spec.path
                                  : "trace listed twice: " + spec.path + " is the same file as " + it->second);
        PreparedTrace t;
        t.spec = spec;
        if (fs::is_directory(spec.path, ec))
            throw TraceError(spec.path + ": is a directory, expected a trace file (HDF5)");
        const bool exists = file_exists(spec.path);
        if (!exists && spec.synth.is_null())
            throw TraceError("trace file not found: " + spec.path +
                             " (give a \"synth\" recipe in the config to generate it, or run "
                             "`retro-bench synth`)");
        std::optional<SynthParams> recipe;
        if (!spec.synth.is_null()) {
            recipe = SynthParams::from_json(spec.synth);
            recipe->validate();
        }
        if (exists) {
            t.info = TraceReader(spec.path).info();
            if (recipe) t.stale = synth_file_is_stale(spec.path, t.info.source, synth_trace_info(*recipe).source);
        }
        if (!exists || t.stale) {
            if (generate_missing) {
                if (note)
                    note((t.stale ? "regenerating synthetic trace " + spec.path +
                                        " (made from another recipe or generator version)"
                                  : "generating synthetic trace " + spec.path));
                const auto t0 = Clock::now();
                const fs::path parent = fs::path(spec.path).parent_path();
                std::error_code ec;
                if (!parent.empty()) fs::create_directories(parent, ec);
                synthesize(*recipe, spec.path, [stop] { return stop && stop->load(); });
                if (note) note("generated " + spec.path + " in " + std::to_string((int)secs_since(t0)) + " s");
                t.stale = false;
                t.info = TraceReader(spec.path).info();
            } else {
                t.needs_synth = true;
                t.info = synth_trace_info(*recipe);
            }
        }
        if (!t.needs_synth) t.fingerprint = trace_fingerprint(spec.path, t.info);  // sampled: cheap
        const TraceInfo& info = t.info;
        t.layers = select_or_all(cfg.layers, info.layers, "layer", spec.path);
        t.kv_heads = select_or_all(cfg.kv_heads, iota_vec(info.num_kv_heads), "kv_head", spec.path);
        try {
            t.steps = cfg.steps.resolve(info.num_decode_steps);
        } catch (const ConfigError& e) {
            throw ConfigError(spec.path + ": " + e.what());
        }
        json id = {{"path", spec.path},          {"source", info.source},
                   {"model", info.model},        {"prompt_len", info.prompt_len},
                   {"steps", info.num_decode_steps}, {"q_heads", info.num_q_heads},
                   {"kv_heads", info.num_kv_heads},  {"head_dim", info.head_dim},
                   {"dtype", dtype_name(info.dtype)}};
        t.trace_id = id.dump();
        out.push_back(std::move(t));
    }
    return out;
}

namespace {
// The readable start of a run id, which names a directory (parts/<run_id>/): a compiled method's name
// as it is; a Python method "py:dir/file.py:Class" as "py-Class" (its file is in the hashed key).
std::string run_id_stem(const std::string& method) {
    std::string s = method.rfind("py:", 0) == 0 ? "py-" + method.substr(method.rfind(':') + 1) : method;
    for (char& c : s)
        if (!std::isalnum((unsigned char)c) && c != '.' && c != '_' && c != '-') c = '_';
    return s;
}
}  // namespace

std::string run_id_for(const PreparedTrace& t, const MethodRun& r, const RunConfig& cfg) {
    json key = {{"trace", t.trace_id}, {"method", r.method}, {"params", r.params},
                {"recall_k", cfg.recall_k}, {"steps", t.steps}, {"kv_dtype", cfg.kv_dtype}};
    // a Python method's source hash: an edited file is a different method (never mixed by --resume)
    const json& source = find_method(r.method).source;
    if (!source.is_null()) key["method_source"] = source;
    if (!r.system.is_null()) key["system"] = r.system;  // only configs with a "system" key
    if (r.batch > 0)  // backend "cuda" only: CPU run ids are unchanged
        key["cuda"] = {{"batch", r.batch}, {"kmeans", cfg.cuda.kmeans}, {"kv_heads", t.kv_heads}};
    if (!r.kernel.empty()) key["cuda"]["kernel"] = r.kernel;  // full's kernels are separate runs
    if (!r.kv.empty()) key["cuda"]["kv"] = r.kv;              // so are wave's KV placements
    return run_id_stem(r.method) + "-" + short_hash(key.dump());
}

namespace {

struct Job {
    size_t trace;  // index into traces
    int layer, kv_head;
    std::vector<size_t> runs;  // indices into cfg.runs still missing for this head
};

// One (trace, layer, KV head): builds every pending method, replays the steps, writes one part per run.
// Runs of a method that differ only in search-time parameters (ParamSpec::search: a budget sweep's k,
// beams, wave's zones) share one build: the first is built, the others are copies of it
// (Method::clone_built) taking their own parameters — what a fresh build would select (SharedBuild.*),
// at the cost of a copy. Each such run's build_ms is the shared build's time (the index it searches
// cost that to build). Returns how many runs took a copy.
size_t run_head(const RunConfig& cfg, const PreparedTrace& tr, const TraceReader& reader, const Job& job,
                const std::vector<std::string>& run_ids, const std::vector<MetricInfo>& reg,
                const ResultsDir& rd, const HardwareProfile& hw) {
    const int last_step = tr.steps.back();
    ReadOptions ro;
    ro.max_steps = last_step + 1;
    const HeadSlice slice = reader.read_head(job.layer, job.kv_head, ro);
    const int d = slice.head_dim, g = slice.group;
    const MethodContext ctx =
        head_context(slice, cfg.kv_dtype == "trace" ? tr.info.dtype : parse_dtype(cfg.kv_dtype));

    struct Instance {
        size_t run;
        std::unique_ptr<Method> m;
        HeadPart part;
        Selection sel;
        std::unique_ptr<HeadSystem> sys;  // system model: GPU block cache, traffic, model_us
    };
    std::vector<Instance> inst;
    std::map<std::string, size_t> first_build;  // method + build parameters -> the instance built first
    size_t shared = 0;
    const KVView prompt{slice.keys.data(), slice.values.data(), slice.prompt_len, d};
    for (size_t r : job.runs) {
        const MethodRun& mr = cfg.runs[r];
        const MethodInfo& info = find_method(mr.method);
        Instance I;
        I.run = r;
        I.m = info.make(mr.params);
        const std::string key = mr.method + "\n" + build_params(info, mr.params).dump();
        const auto built = first_build.find(key);
        std::unique_ptr<Method> copy = built != first_build.end() ? inst[built->second].m->clone_built(*I.m) : nullptr;
        if (copy) {
            I.m = std::move(copy);
            I.part.build_ms = inst[built->second].part.build_ms;
            ++shared;
        } else {
            MethodContext c = ctx;
            c.seed = method_seed(mr.method, mr.params, job.layer, job.kv_head);
            const auto t0 = Clock::now();
            I.m->build(c, prompt);
            I.part.build_ms = secs_since(t0) * 1e3;
            if (built == first_build.end()) first_build[key] = inst.size();
        }
        {  // system model per (run, head): lib/system/head_system.hpp
            HeadSystemContext sc;
            sc.method = mr.method;
            sc.params = mr.params;
            sc.head_dim = d;
            sc.group = g;
            sc.elem_bytes = (double)dtype_bytes(ctx.storage);
            sc.prompt_len = slice.prompt_len;
            sc.num_kv_heads = tr.info.num_kv_heads;
            const SystemParams sp = mr.system.is_null() ? SystemParams{} : SystemParams::from_json(mr.system, "system");
            I.sys = std::make_unique<HeadSystem>(sp, hw, sc);
        }
        const double build_ms = I.part.build_ms;
        I.part = new_head_part(run_ids[r], slice, tr.steps, tr.fingerprint, reg);
        I.part.build_ms = build_ms;
        I.part.method_source = find_method(mr.method).source;
        inst.push_back(std::move(I));
    }

    Evaluator ev(slice, cfg.recall_k);
    std::vector<float> qbuf((size_t)g * d);
    std::vector<QueryMetrics> qm;
    size_t next_sel = 0;
    for (int t = 0; t <= last_step; ++t) {
        const KVView kv{slice.keys.data(), slice.values.data(), slice.visible(t), d};
        for (auto& I : inst) I.m->append(kv, slice.prompt_len + t);
        if (tr.steps[next_sel] != t) continue;
        ++next_sel;
        ev.prepare_step(t);
        for (int h = 0; h < g; ++h)
            std::copy(slice.query(h, t), slice.query(h, t) + d, qbuf.begin() + (size_t)h * d);
        for (auto& I : inst) {
            I.sel.clear();
            const auto t0 = Clock::now();
            I.m->select(qbuf.data(), t, kv, I.sel);
            const double select_us = secs_since(t0) * 1e6;
            const double attend_us = ev.evaluate(I.sel, cfg.runs[I.run].method, qm);
            add_query_metrics(I.part, qm, cfg.recall_k);
            const Footprint fp = I.m->footprint();
            I.part.kv_metrics["scan_ops"].push_back(I.sel.scan_ops / kv.n);
            I.sys->record(I.sel, kv.n, fp);  // h2d/d2h/gpu_bytes, cache_hit, model_us: at the end
            I.part.kv_metrics["select_us"].push_back(select_us);
            I.part.kv_metrics["attend_us"].push_back(attend_us);
        }
        if (next_sel == tr.steps.size()) break;
    }
    for (auto& I : inst) {
        I.sys->finish(I.part.kv_metrics);  // replays the GPU cache over the steps (Belady needs all)
        rd.write_part(I.part);
    }
    return shared;
}

/// What both executions need from run_config.
struct Execution {
    const RunConfig& cfg;
    const RunnerOptions& opt;
    const std::vector<PreparedTrace>& traces;
    const std::vector<TraceReader*>& readers;
    const std::vector<std::vector<std::string>>& ids;
    const std::vector<MetricInfo>& reg;
    const ResultsDir& rd;
    const HardwareProfile& hw;
    json& session;  ///< this session's manifest entry
};

// Worker threads pull (trace, layer, KV head) jobs. Returns the first error (the others stop).
bool is_interrupted(const std::exception_ptr& e) {
    try {
        std::rethrow_exception(e);
    } catch (const Interrupted&) {
        return true;
    } catch (...) {
        return false;
    }
}

std::exception_ptr run_on_cpu(const Execution& x, const std::vector<Job>& jobs, RunOutcome& outcome) {
    const RunnerOptions& opt = x.opt;
    const int threads = run_threads(x.cfg, opt.threads, jobs.size());
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex mu;
    std::exception_ptr first_error;
    std::atomic<size_t> shared{0};
    RunProgress prog;
    prog.total = (int)jobs.size();
    prog.skipped = outcome.heads_skipped;
    const auto t_start = Clock::now();
    if (opt.on_progress) opt.on_progress(prog);
    auto worker = [&] {
        for (;;) {
            if (failed || (opt.stop && opt.stop->load())) return;
            const size_t i = next.fetch_add(1);
            if (i >= jobs.size()) return;
            try {
                shared += run_head(x.cfg, x.traces[jobs[i].trace], *x.readers[jobs[i].trace], jobs[i],
                                   x.ids[jobs[i].trace], x.reg, x.rd, x.hw);
            } catch (...) {
                // a stop request that reached a method mid-call (a Python method:
                // python/methods/py_interrupt.hpp): this head's parts are not written; the run ends
                // "interrupted", as between heads
                if (opt.stop && opt.stop->load() && is_interrupted(std::current_exception())) return;
                std::lock_guard<std::mutex> lk(mu);
                if (!first_error) first_error = std::current_exception();
                failed = true;
                return;
            }
            std::lock_guard<std::mutex> lk(mu);
            ++prog.done;
            prog.elapsed_s = secs_since(t_start);
            prog.eta_s = prog.elapsed_s / prog.done * (prog.total - prog.done);
            if (opt.on_progress) opt.on_progress(prog);
        }
    };
    x.session["threads"] = threads;
    x.session["jobs"] = jobs.size();
    if (threads > 1) set_blas_threads(1);  // parallelism is over heads; BLAS inside methods stays serial
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) pool.emplace_back(worker);
    for (auto& th : pool) th.join();
    x.session["builds_shared"] = shared.load();  // (run, head) builds replaced by a copy of another run's
    outcome.heads_run = prog.done;
    outcome.interrupted = prog.done < prog.total;
    return first_error;
}

// The device runs one (trace, layer) at a time, every pending run of it (lib/bench/cuda_runner). Runs
// that do not fit in memory or fail are skipped and listed in the manifest session ("skipped"); --resume
// tries them again.
std::exception_ptr run_on_gpu(const Execution& x, const std::vector<Job>& jobs, RunOutcome& outcome) {
    std::vector<CudaLayerJob> layers;
    for (const Job& j : jobs) {
        if (layers.empty() || layers.back().trace != j.trace || layers.back().layer != j.layer)
            layers.push_back({j.trace, j.layer, {}});
        auto& runs = layers.back().runs;
        for (size_t r : j.runs)
            if (std::find(runs.begin(), runs.end(), r) == runs.end()) runs.push_back(r);
    }
    for (auto& l : layers) std::sort(l.runs.begin(), l.runs.end());
    RunProgress prog;
    prog.total = (int)layers.size();
    const auto t_start = Clock::now();
    if (x.opt.on_progress) x.opt.on_progress(prog);
    std::map<size_t, std::string> skipped;  // run -> why it did not run: "does not fit: ..." or "failed: ..."
    std::exception_ptr error;
    x.session["jobs"] = layers.size();
    for (const CudaLayerJob& l : layers) {
        if (x.opt.stop && x.opt.stop->load()) break;
        try {
            run_cuda_layer(x.cfg, x.traces[l.trace], *x.readers[l.trace], l, x.ids[l.trace], x.reg, x.rd, x.hw,
                           *x.opt.gpu, skipped);
        } catch (...) {
            error = std::current_exception();
            break;
        }
        ++prog.done;
        prog.elapsed_s = secs_since(t_start);
        prog.eta_s = prog.elapsed_s / prog.done * (prog.total - prog.done);
        if (x.opt.on_progress) x.opt.on_progress(prog);
    }
    x.session["skipped"] = json::array();
    for (const auto& [r, why] : skipped) {
        if (x.opt.on_note) x.opt.on_note("skipped: " + why);
        x.session["skipped"].push_back(why);
        if (why.rfind(x.cfg.runs[r].label() + ": " + kFailedRun, 0) == 0) outcome.failed.push_back(why);
    }
    outcome.heads_run = prog.done;
    outcome.interrupted = prog.done < prog.total;
    return error;
}

/// The manifest of earlier sessions, or null when there is none. A manifest that does not parse (a disk
/// fault, a hand edit; writes are atomic) is kept as manifest.json.corrupt-<time> and a new one started.
json read_manifest(const std::string& path, const std::function<void(const std::string&)>& note) {
    if (!file_exists(path)) return json();
    try {
        return json::parse(read_file(path));
    } catch (const json::exception& e) {
        const std::string kept = path + ".corrupt-" + utc_now_compact();
        std::error_code ec;
        fs::rename(path, kept, ec);
        if (ec) throw Error(path + " is corrupt (" + e.what() + ") and cannot be kept aside as " + kept + ": " +
                            ec.message());
        if (note) note("warning: " + path + " is corrupt (" + e.what() + "); kept as " + kept +
                       ", starting a new manifest");
        return json();
    }
}

/// Marks the sessions left `running` by a process that is gone (killed hard: SIGKILL, OOM, power) as
/// `stale`; the lock tells (bench/results_lock.hpp). Returns how many were marked.
int mark_stale_sessions(json& sessions, const ResultsLock& lock, const std::function<void(const std::string&)>& note) {
    int marked = 0;
    for (auto& s : sessions) {
        if (!s.is_object() || s.value("status", "") != "running") continue;
        if (!lock_holder_gone(lock.dir(), s.value("lock", ".lock"), lock)) continue;
        s["status"] = "stale";
        s["marked_stale_at"] = utc_now_iso();
        ++marked;
        if (note)
            note("note: an earlier session (started " + s.value("started_at", "?") +
                 (s.contains("pid") ? ", PID " + s["pid"].dump() + " on " + s.value("host", "?") : std::string()) +
                 ") ended without finishing (killed?); marked stale");
    }
    return marked;
}

/// The part on disk of a unit this session owns, parsed in full and checked against its key; a damaged
/// one (bench/damaged_parts.hpp) is moved aside and reported in one line, and nullopt returned so that its
/// unit is recomputed. A whole part of another trace is not damage: the caller refuses that run.
std::optional<HeadPart> kept_part(const ResultsDir& rd, const std::string& run_id, int layer, int kv_head,
                                  const std::function<void(const std::string&)>& note) {
    PartCheck c = rd.check_part(run_id, layer, kv_head);
    if (c.ok()) return std::move(c.part);
    const std::string path = rd.part_path(run_id, layer, kv_head);
    const std::string aside = move_aside_damaged(path);
    if (note) note("warning: " + damaged_part_note(path, c.damage, aside));
    return std::nullopt;
}

/// Removes the results directory this run created if the run fails before writing anything in it (bad
/// input found after the lock was taken): a rejected config leaves nothing behind.
struct CreatedDirCleanup {
    std::string dir;
    bool armed = false;
    ~CreatedDirCleanup() {
        std::error_code ec;
        if (armed && holds_only_lock_files(dir)) fs::remove_all(dir, ec);
    }
};

}  // namespace

RunOutcome run_config(const RunConfig& cfg, const RunnerOptions& opt) {
    RunOutcome outcome;
    const std::string dir = opt.results_root + "/" + cfg.name;
    outcome.dir = dir;
    const bool sharded = opt.shard.active();
    const json host = host_info();
    json origin = {{"revision", git_revision()}, {"config_hash", config_hash(cfg)}, {"host", host.value("hostname", "")}};
    if (sharded) origin["shard"] = opt.shard.str();
    const ResultsDir rd(dir, origin);

    // ---- everything that can fail on bad input happens before any work ----
    const bool on_gpu = cfg.backend == "cuda";
    if (on_gpu) check_cuda_backend(opt.gpu);  // first: before a synthetic trace is generated
    if (sharded && opt.force)
        throw ConfigError("--force cannot be combined with --shard: it would delete the other shards' results; "
                          "remove " + dir + " before the sweep instead");
    // the checks validate makes too (lib/bench/preflight), on the traces as they are before generation;
    // read-only, so before the lock: a refused config leaves no results directory behind
    HardwareProfile hw = check_before_work(cfg, prepare_traces(cfg, false), {opt.threads, opt.max_memory}).hardware;
    if (cfg.hardware == kMeasuredHardware) {  // the cost model calibrated by this device (about a second)
        try {
            hw = measured_profile(opt.gpu->measure());
        } catch (const ParamError& e) {
            throw ConfigError(std::string("hardware \"measured\": ") + e.what());
        }
        if (opt.on_note)
            opt.on_note("hardware \"measured\": " + hw.name + ": HBM " + std::to_string((int)hw.hbm_GBps) + " GB/s, PCIe " +
                        std::to_string((int)hw.pcie_h2d_GBps) + " GB/s, transfer latency " +
                        std::to_string(hw.pcie_latency_us).substr(0, 5) + " us");
    }
    // Lock before looking at the directory: the "already holds results" check, --force's deletion and
    // the temp-file cleaning then act on a directory no other run writes (bench/results_lock.hpp); shards
    // share the directory's lock and hold their own shard's exclusively.
    std::error_code dir_ec;
    CreatedDirCleanup created{dir, !fs::exists(dir, dir_ec)};
    ResultsLockRequest lock_req;
    lock_req.wait = opt.wait_lock;
    lock_req.command = opt.command_line;
    lock_req.on_wait = opt.on_note;
    if (sharded) {
        lock_req.shard_index = opt.shard.index;
        lock_req.shard_count = opt.shard.count;
    }
    const ResultsLock lock(dir, lock_req);
    if (!sharded && rd.has_results() && !opt.resume && !opt.force)
        throw ConfigError(dir + " already holds results: pass --resume to continue it or --force to "
                                "replace it");
    const auto traces = prepare_traces(cfg, true, opt.on_note, opt.stop);
    std::vector<TraceReader*> readers;
    std::vector<std::unique_ptr<TraceReader>> reader_store;
    for (const auto& t : traces) {
        reader_store.push_back(std::make_unique<TraceReader>(t.spec.path));
        readers.push_back(reader_store.back().get());
    }
    if (on_gpu)
        for (const auto& t : traces) check_cuda_trace(t, cfg, *opt.gpu);
    const auto reg = sweep_metric_registry(cfg);
    const auto ids = sweep_run_ids(cfg, traces);
    // The units of this shard (lib/bench/shard.hpp): every unit when not sharded.
    const auto units = sweep_units(cfg, traces, on_gpu);
    const std::vector<int> owner = sharded ? assign_shards(units, opt.shard.count) : std::vector<int>(units.size(), 0);
    std::set<std::tuple<size_t, size_t, int, int>> mine;  // (trace, run, layer, kv_head or -1)
    for (size_t i = 0; i < units.size(); ++i)
        if (owner[i] == opt.shard.index) mine.insert({units[i].trace, units[i].run, units[i].layer, units[i].kv_head});
    auto in_shard = [&](size_t ti, size_t r, int l, int h) { return mine.count({ti, r, l, on_gpu ? -1 : h}) > 0; };
    if (sharded && !opt.resume)
        for (size_t ti = 0; ti < traces.size(); ++ti)
            for (int l : traces[ti].layers)
                for (int h : traces[ti].kv_heads)
                    for (size_t r = 0; r < cfg.runs.size(); ++r)
                        if (in_shard(ti, r, l, h) && rd.has_part(ids[ti][r], l, h))
                            throw ConfigError(dir + " already holds results of shard " + opt.shard.str() +
                                              ": pass --resume to continue it, or remove " + dir);

    if (opt.force) clear_locked_dir(lock);
    clean_temp_files(lock);  // a shard's cleaning spares the other shards' writes in flight
    created.armed = false;

    // ---- plan: (trace, layer, kv head) jobs with this shard's runs still missing; parts on disk must
    // come from the same trace content (never mix two traces at one path) ----
    std::vector<Job> jobs;
    for (size_t ti = 0; ti < traces.size(); ++ti)
        for (int l : traces[ti].layers)
            for (int h : traces[ti].kv_heads) {
                Job j{ti, l, h, {}};
                bool any = false;
                for (size_t r = 0; r < cfg.runs.size(); ++r) {
                    if (!in_shard(ti, r, l, h)) continue;
                    any = true;
                    const auto kept = rd.has_part(ids[ti][r], l, h) ? kept_part(rd, ids[ti][r], l, h, opt.on_note)
                                                                    : std::nullopt;
                    if (!kept) {
                        j.runs.push_back(r);
                        continue;
                    }
                    const std::string& had = kept->trace_fingerprint;
                    if (!had.empty() && had != traces[ti].fingerprint)
                        throw TraceError(traces[ti].spec.path + " is not the trace the results in " + dir +
                                         " were computed from: " + rd.part_path(ids[ti][r], l, h) +
                                         " has trace fingerprint " + had + ", the file now has " +
                                         traces[ti].fingerprint + " (replaced or regenerated?); restore it, "
                                         "rerun with --force to discard those results, or use another --results");
                }
                if (!any) continue;
                if (j.runs.empty()) ++outcome.heads_skipped;
                else jobs.push_back(std::move(j));
            }

    // ---- manifest (one machine) or this shard's session file (lib/bench/merge.hpp) ----
    const auto t_session = Clock::now();
    const std::string device = on_gpu ? opt.gpu->device_name() : "";
    const SweepSummaryInput summary{cfg, traces, ids, reg, rd, hw, opt.config_path, device, git_revision()};
    const std::string manifest_path = sharded ? shard_session_path(dir, opt.shard) : dir + "/manifest.json";
    json manifest = read_manifest(manifest_path, opt.on_note);
    json sessions = manifest.is_object() && manifest.contains("sessions") ? manifest["sessions"] : json::array();
    mark_stale_sessions(sessions, lock, opt.on_note);
    json session = {{"started_at", utc_now_iso()}, {"command", opt.command_line}, {"status", "running"},
                    {"host", origin["host"]}, {"revision", git_revision()}, {"pid", lock.holder().pid},
                    {"lock", lock.holder().lock}};
    if (sharded) session["units"] = mine.size();
    sessions.push_back(session);
    if (sharded) {
        manifest = {{"index", opt.shard.index}, {"count", opt.shard.count}, {"config_file", opt.config_path},
                    {"config_source", cfg.source}, {"config_hash", origin["config_hash"]},
                    {"revision", git_revision()}, {"device", device}, {"status", "running"}};
        if (cfg.hardware == kMeasuredHardware) manifest["hardware"] = hw.to_json();  // merge models with it
    } else {
        manifest = sweep_manifest(summary);
        manifest["status"] = "running";
        manifest["host"] = host;
    }
    manifest["sessions"] = sessions;
    write_file_atomic(manifest_path, manifest.dump(2) + "\n");

    // ---- execute: in parallel over heads on the CPU, one layer at a time on the GPU ----
    Execution ex{cfg, opt, traces, readers, ids, reg, rd, hw, manifest["sessions"].back()};
    const std::exception_ptr first_error = on_gpu ? run_on_gpu(ex, jobs, outcome) : run_on_cpu(ex, jobs, outcome);

    auto finish_manifest = [&](const std::string& status) {
        manifest["status"] = status;
        manifest["sessions"].back()["status"] = status;
        manifest["sessions"].back()["wall_s"] = secs_since(t_session);
        manifest["sessions"].back()["finished_at"] = utc_now_iso();
        // Peak resident memory of this process (heads stream one per worker: docs/performance.md)
        manifest["sessions"].back()["peak_rss_bytes"] = (int64_t)peak_rss_bytes();
        manifest["finished_at"] = utc_now_iso();
        write_file_atomic(manifest_path, manifest.dump(2) + "\n");
    };
    if (first_error) {
        finish_manifest("failed");
        std::rethrow_exception(first_error);
    }
    if (!sharded) {
        outcome.records = write_run_summaries(summary);
        finish_manifest(outcome.interrupted ? "interrupted" : "complete");
        return outcome;
    }
    finish_manifest(outcome.interrupted ? "interrupted" : "complete");
    if (outcome.interrupted) return outcome;
    // The shard that finds every unit of the sweep present merges (the others leave it to the last).
    size_t present = 0, total = 0;
    for (size_t ti = 0; ti < traces.size(); ++ti)
        for (int l : traces[ti].layers)
            for (int h : traces[ti].kv_heads)
                for (size_t r = 0; r < cfg.runs.size(); ++r, ++total) present += rd.has_part(ids[ti][r], l, h);
    if (present < total) {
        if (opt.on_note)
            opt.on_note("shard " + opt.shard.str() + " complete; " + std::to_string(present) + " of " +
                        std::to_string(total) + " part files of the sweep present: the last shard merges "
                        "(or: retro-bench merge " + dir + ")");
        return outcome;
    }
    if (opt.on_note) opt.on_note("shard " + opt.shard.str() + ": every part file of the sweep is present; merging");
    try {
        outcome.records = merge_results(dir).records;
    } catch (const Error& e) {
        throw Error("shard " + opt.shard.str() + " finished, but merging failed: " + e.what());
    }
    outcome.merged = true;
    return outcome;
}

}  // namespace retro
