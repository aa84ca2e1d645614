// retro_gpu_check: runs every CUDA kernel check and microbenchmark without GTest (the RETRO_GPU_ONLY
// build of scripts/gpu-check.sh), then the wave decode step vs full attention per layer through the
// CUDA backend's run path (kernels/run/wave_vs_full.hpp), and writes OUT/gpu-report.json and
// OUT/gpu-report.txt.
//   retro_gpu_check [--out DIR] [--quick] [--checks-only] [--filter SUBSTRING] [--skip SUBSTRING]
//                   [--wave-only] [--tiny] [--hardware VALUES]
//   --filter S / --skip S  only the checks whose name contains S / those whose name does not (lease-run.sh
//                runs a variant's check in a process of its own: a kernel that faults takes the context with it)
//   --wave-only  only the wave-vs-full run (no checks, no benchmarks)
//   --bench-only GROUP  only the microbenchmarks whose group contains GROUP (gather, full_decode: the own,
//                FlashInfer's and cuDNN's variants; wave_step, kmeans), on --contexts x --batches
//   --tiny       the wave-vs-full run on a tiny layer (the CPU emulation's smoke test)
//   --hardware   "key value" lines of a hardware profile: the cost model's prediction next to each row
//   --contexts N,N,...  --batches B,B,...   the wave run's grid (default 32768,131072 x 1,2,4,...,64)
//   --kmeans cpu|gpu  the wave index's k-means (default gpu; cpu = lib/cluster, BLAS-free in this build)
//   --wave-kv host|gpu|both|all  wave's clustered KV in pinned host memory ("wave", the paper's setting and
//                     host path; "wave-dev", the cache's table on the GPU; "wave-dev-nocache" and
//                     "wave-dev-async": Figure 15's ablation), in device memory ("wave-hbm",
//                     within GPU memory, the step on the device alone), both (default), or all: + "wave-hbm-host"
//                     (device memory, host lookups and plan)
//   --host-threads N  wave's host lookup workers (default min(8, cores - 1))
//   --seeds LIST      the seed baselines' rows, a comma list of quest, pq, magicpig, or none (default all;
//                     magicpig's key hashing is a single-threaded loop in this BLAS-free build: minutes at 128K)
//   --steps N         decode steps per row (default 8; the timing rule asks >= 64 timed)
//   --sequences N     batches of N distinct sequences (synthetic layers of other seeds; default 1: copies)
//   --warm-steps N    of them, the first N run in full but untimed: they fill the block cache (default 0)
//   --step-graph  full's and wave's device steps launched as one CUDA graph each (GpuLayerJob::step_graph;
//                the other rows as without); their phases are not timed, the step and its capture cost are
//   --no-launch-gate  time each step as one host thread issues it, its launch calls inside the events
//                (default: behind a launch gate, the GPU's work alone; GpuLayerJob::launch_gate)
//   --time-budget S  the wave run starts no row S seconds or more after this process started, and none after a
//                SIGTERM or SIGINT (timeout's, a lease's limit): the rows measured so far are written, the report
//                saying where and why the run stopped ("wave_run_stopped"); default: no budget
//   --measured   the model calibrated by this device (gpu/measured.hpp): the --hardware profile (or the
//                defaults) with the measured HBM, PCIe and transfer-latency ceilings, as "hardware":
//                "measured" does for `retro-bench run`
// Exit status: 0 all checks passed, 1 a check or the wave run failed or threw, 77 no CUDA device
// (everything skipped; the report is still written), 2 bad arguments or an --out DIR that cannot be made
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <optional>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/registry.hpp"
#include "core/check.hpp"
#include "cuda_api.hpp"
#include "run/cuda_backend.hpp"
#include "run/wave_vs_full.hpp"
#include "gpu/measured.hpp"

using namespace retro;
using namespace retro::cuda;

namespace {

// A SIGTERM or SIGINT during the wave run: no further row starts, the report is written with the rows so far
// (a second signal kills: the handler restores the default).
std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) {
    g_stop_signal = sig;
    std::signal(SIGTERM, SIG_DFL);
    std::signal(SIGINT, SIG_DFL);
}

std::string num(double v) {
    if (!(v == v) || v == 1.0 / 0.0 || v == -1.0 / 0.0) return "null";
    char b[64];
    std::snprintf(b, sizeof b, "%.6g", v);
    return b;
}

}  // namespace

/// "1,8,64" -> {1, 8, 64}; empty on a malformed list.
std::vector<int> int_list(const std::string& s) {
    std::vector<int> v;
    std::stringstream ss(s);
    std::string x;
    while (std::getline(ss, x, ',')) {
        char* end = nullptr;
        const long n = std::strtol(x.c_str(), &end, 10);
        if (x.empty() || *end != '\0' || n < 1 || n > (1L << 24)) return {};
        v.push_back((int)n);
    }
    return v;
}

int main(int argc, char** argv) {
    const auto started = std::chrono::steady_clock::now();
    double time_budget_s = -1;  // --time-budget: < 0 none
    std::string out_dir = ".", filter, skip, hardware;
    std::vector<int> contexts, batches;
    bool kmeans_gpu = true, measured = false, wave_host = true, wave_dev = true, wave_ablation = true, wave_hbm = true, wave_hbm_host = false;
    bool seed_quest = true, seed_pq = true, seed_magicpig = true;  // --seeds
    int host_threads = 0;
    int steps = 0, warm_steps = 0, sequences = 1;  // --steps, --warm-steps (0 steps: the layer's default), --sequences
    bool quick = false, checks_only = false, wave_only = false, tiny = false;
    std::string bench_only;
    bool launch_gate = true, step_graph = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--out" && i + 1 < argc) out_dir = argv[++i];
        else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
        else if (a == "--skip" && i + 1 < argc) skip = argv[++i];
        else if (a == "--hardware" && i + 1 < argc) hardware = argv[++i];
        else if (a == "--bench-only" && i + 1 < argc) bench_only = argv[++i];
        else if (a == "--kmeans" && i + 1 < argc && (std::string(argv[i + 1]) == "cpu" || std::string(argv[i + 1]) == "gpu"))
            kmeans_gpu = std::string(argv[++i]) == "gpu";
        else if (a == "--wave-kv" && i + 1 < argc &&
                 (std::string(argv[i + 1]) == "host" || std::string(argv[i + 1]) == "gpu" ||
                  std::string(argv[i + 1]) == "both" || std::string(argv[i + 1]) == "all")) {
            const std::string v = argv[++i];
            wave_host = wave_dev = wave_ablation = v != "gpu", wave_hbm = v != "host", wave_hbm_host = v == "all";
        } else if (a == "--seeds" && i + 1 < argc) {
            const std::string v = std::string(",") + argv[++i] + ",";
            seed_quest = v.find(",quest,") != std::string::npos, seed_pq = v.find(",pq,") != std::string::npos;
            seed_magicpig = v.find(",magicpig,") != std::string::npos;
            bool known = true;  // every item one of the names (or "none")
            for (size_t b = 1, e; b < v.size(); b = e + 1) {
                e = v.find(',', b);
                const std::string item = v.substr(b, e - b);
                if (item != "quest" && item != "pq" && item != "magicpig" && item != "none") known = false;
            }
            if (!known) {
                std::fprintf(stderr, "retro_gpu_check: --seeds takes a comma list of quest, pq, magicpig or none\n");
                return 2;
            }
        } else if (a == "--host-threads" && i + 1 < argc && std::atoi(argv[i + 1]) > 0)
            host_threads = std::atoi(argv[++i]);
        else if (a == "--steps" && i + 1 < argc && std::atoi(argv[i + 1]) > 0)
            steps = std::atoi(argv[++i]);
        else if (a == "--time-budget" && i + 1 < argc && std::atof(argv[i + 1]) >= 0)
            time_budget_s = std::atof(argv[++i]);
        else if (a == "--sequences" && i + 1 < argc && std::atoi(argv[i + 1]) > 0)
            sequences = std::atoi(argv[++i]);
        else if (a == "--warm-steps" && i + 1 < argc && std::atoi(argv[i + 1]) >= 0)
            warm_steps = std::atoi(argv[++i]);
        else if ((a == "--contexts" || a == "--batches") && i + 1 < argc) {
            auto& v = a == "--contexts" ? contexts : batches;
            v = int_list(argv[++i]);
            if (v.empty()) {
                std::fprintf(stderr, "retro_gpu_check: %s %s: expected positive integers separated by commas\n",
                             a.c_str(), argv[i]);
                return 2;
            }
        }
        else if (a == "--quick") quick = true;
        else if (a == "--checks-only") checks_only = true;
        else if (a == "--wave-only") wave_only = true;
        else if (a == "--tiny") tiny = true;
        else if (a == "--measured") measured = true;
        else if (a == "--no-launch-gate") launch_gate = false;
        else if (a == "--step-graph") step_graph = true;
        else {
            std::fprintf(stderr, "usage: retro_gpu_check [--out DIR] [--quick] [--checks-only] [--filter S] [--skip S] "
                                 "[--wave-only] [--bench-only GROUP] [--tiny] [--hardware VALUES] [--contexts N,..] [--batches B,..] "
                                 "[--kmeans cpu|gpu] [--measured] [--wave-kv host|gpu|both|all] [--seeds LIST] [--host-threads N] "
                                 "[--no-launch-gate] [--step-graph] [--steps N] [--warm-steps N] [--sequences N] [--time-budget S]\n");
            return 2;
        }
    }
    {  // --out DIR: made if missing; a DIR that cannot be made or written fails now, before any work
        std::error_code ec;
        std::filesystem::create_directories(out_dir, ec);
        if (ec || !std::ofstream(out_dir + "/gpu-report.txt")) {
            std::fprintf(stderr, "retro_gpu_check: --out %s: cannot create or write this directory%s%s\n",
                         out_dir.c_str(), ec ? ": " : "", ec ? ec.message().c_str() : "");
            return 2;
        }
    }
    std::ostringstream js, txt;
    const std::string why = device_status();
    const bool have = why.empty();
    const std::string dev = have ? device_name() : "";
    char when[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    js << "{\n  \"time\": " << json_quote(when) << ",\n  \"device\": " << json_quote(dev)
       << ",\n  \"device_status\": " << json_quote(have ? "ok" : why)
       << ",\n  \"compute_capability\": " << (have ? device_cc() : 0) << ",\n";
    // the kernel variants this process runs (RETRO_SELECT_HIST, RETRO_SELECT_SPLIT, RETRO_EST_WARPS): a
    // variant run's report says which it was
    try {  // read here first: a bad value is refused before any work
        js << "  \"kernel_variants\": {\"select_hist\": " << json_quote(select_hist_name(select_histograms()))
           << ", \"select_split\": " << json_quote(select_split_name(select_split()))
           << ", \"estimate_width\": " << json_quote(estimate_width_name(estimate_width()))
           // what select_split auto compares B * Hkv with (cudaOccupancyMaxActiveClusters; 0 below sm_90)
           << ", \"select_split_active_clusters\": {\"M<=4096\": " << (have ? select_split_active_clusters(4096) : 0)
           << ", \"M<=8192\": " << (have ? select_split_active_clusters(8192) : 0) << "}},\n";
    } catch (const ParamError& e) {
        std::fprintf(stderr, "retro_gpu_check: %s\n", e.what());
        return 2;
    }
    txt << "retro-bench GPU check  " << when << "\ndevice: " << (have ? dev : "(none: " + why + "; all checks skipped)") << "\n\n";

    int failed = 0, passed = 0;
    js << "  \"checks\": [";
    bool first = true;
    for (const CheckCase& c : gpu_checks()) {
        if (wave_only || !bench_only.empty() || (!filter.empty() && c.name.find(filter) == std::string::npos) ||
            (!skip.empty() && c.name.find(skip) != std::string::npos))
            continue;
        std::string status;
        Checker ck;
        if (!have) {
            status = "skipped";
        } else {
            try {
                c.body(ck);
            } catch (const std::exception& e) {
                ck.expect(false, std::string("threw: ") + e.what());
            }
            status = ck.ok() ? "passed" : "failed";
            (ck.ok() ? passed : failed)++;
        }
        std::fprintf(stderr, "[%s] %s\n", status.c_str(), c.name.c_str());
        txt << status << "  " << c.name << "\n" << ck.report();
        js << (first ? "\n" : ",\n") << "    {\"name\": " << json_quote(c.name) << ", \"status\": " << json_quote(status)
           << ", \"failures\": [";
        for (size_t i = 0; i < ck.failures().size(); ++i) js << (i ? ", " : "") << json_quote(ck.failures()[i]);
        js << "], \"notes\": [";
        for (size_t i = 0; i < ck.notes().size(); ++i) js << (i ? ", " : "") << json_quote(ck.notes()[i]);
        js << "]}";
        first = false;
    }
    js << "\n  ],\n  \"checks_passed\": " << passed << ",\n  \"checks_failed\": " << failed << ",\n";
    txt << "\nchecks: " << passed << " passed, " << failed << " failed\n";

    // measured once: the benchmarks' ceilings, the wave run's HBM fractions and --measured's model
    std::optional<DeviceCeilings> ceilings;
    if (have && !checks_only && !wave_only) {
        try {
            std::fprintf(stderr, "measuring ceilings...\n");
            ceilings = measure_ceilings(quick);
            const DeviceCeilings& c = *ceilings;
            js << "  \"d2d_bytes_per_s\": " << num(c.d2d_bytes_per_s) << ",\n  \"h2d_pinned_bytes_per_s\": "
               << num(c.h2d_pinned_bytes_per_s) << ",\n  \"fp32_flop_per_s\": " << num(c.fp32_flop_per_s) << ",\n";
            txt << "\nD2D copy bandwidth (read+write): " << c.d2d_bytes_per_s / 1e9 << " GB/s\n"
                << "pinned H2D bandwidth: " << c.h2d_pinned_bytes_per_s / 1e9 << " GB/s\n"
                << "FP32 FMA peak (SMs x clock x 256): " << c.fp32_flop_per_s / 1e12 << " TFLOP/s\n\n";
            std::fprintf(stderr, "running benchmarks...\n");
            BenchOptions bo;
            bo.quick = quick;
            bo.only = bench_only, bo.contexts = contexts, bo.batches = batches;
            const auto rows = run_benches(bo, c);
            js << "  \"benchmarks\": [";
            for (size_t i = 0; i < rows.size(); ++i) {
                const BenchRow& r = rows[i];
                js << (i ? ",\n" : "\n") << "    {\"name\": " << json_quote(r.name) << ", \"params\": "
                   << json_quote(r.params) << ", \"time_us\": " << num(r.time_us) << ", \"bytes\": " << num(r.bytes)
                   << ", \"flops\": " << num(r.flops) << ", \"rate\": " << num(r.rate) << ", \"unit\": "
                   << json_quote(r.unit) << ", \"ceiling\": " << num(r.ceiling) << ", \"ceiling_name\": "
                   << json_quote(r.ceiling_name) << ", \"fraction\": " << num(r.fraction);
                if (!r.extra.empty()) js << ", " << r.extra;
                js << "}";
                char line[512];
                if (r.unit == "us")
                    std::snprintf(line, sizeof line, "%-22s %-44s %10.1f us  (full %.1f us, ratio %.3f)  {%s}\n",
                                  r.name.c_str(), r.params.c_str(), r.time_us, r.ceiling, r.fraction, r.extra.c_str());
                else
                    std::snprintf(line, sizeof line, "%-22s %-44s %10.1f us  %9.3g %-6s  %5.1f%% of %s\n", r.name.c_str(),
                                  r.params.c_str(), r.time_us, r.rate, r.unit.c_str(), 100 * r.fraction,
                                  r.ceiling_name.c_str());
                txt << line;
            }
            js << "\n  ],\n";
        } catch (const std::exception& e) {
            txt << "benchmarks failed: " << e.what() << "\n";
            js << "  \"benchmark_error\": " << json_quote(e.what()) << ",\n";
            ++failed;
        }
    }
    if (have && !checks_only && bench_only.empty()) {  // the wave decode step vs full attention through the backend's run path
        try {
            if (!ceilings) ceilings = measure_ceilings(true);  // --wave-only
            gpu_run::WaveRunOptions wo;
            wo.hbm_bytes_per_s = ceilings->d2d_bytes_per_s;
            HardwareSpec hw;
            if (!hardware.empty()) hw = gpu_run::read_hardware_values(hardware), wo.hw = &hw;
            if (measured) {
                const DeviceCeilings& c = *ceilings;
                hw = measured_spec(hw, {device_name(), c.d2d_bytes_per_s, c.h2d_pinned_bytes_per_s,
                                        c.d2h_pinned_bytes_per_s, c.transfer_latency_us, c.memory_bytes});
                wo.hw = &hw;
                char line[200];
                std::snprintf(line, sizeof line, "model calibrated by this device: HBM %.0f GB/s, PCIe H2D %.1f GB/s, D2H "
                              "%.1f GB/s, transfer latency %.1f us\n", hw.hbm_GBps, hw.pcie_h2d_GBps, hw.pcie_d2h_GBps,
                              hw.pcie_latency_us);
                txt << line;
            }
            if (quick) wo.contexts = {32768}, wo.batches = {1, 8}, wo.layer.steps = 4;
            if (tiny) gpu_run::make_tiny(wo);
            if (steps > 0) wo.layer.steps = steps;
            wo.warm_steps = warm_steps;
            if (wo.warm_steps >= wo.layer.steps) {
                std::fprintf(stderr, "retro_gpu_check: --warm-steps %d leaves none of the %d steps to time\n",
                             wo.warm_steps, wo.layer.steps);
                return 2;
            }
            if (!contexts.empty()) wo.contexts = contexts;
            if (!batches.empty()) wo.batches = batches;
            wo.kmeans_on_gpu = kmeans_gpu;
            wo.wave_host = wave_host, wo.wave_dev = wave_dev, wo.wave_ablation = wave_ablation, wo.wave_hbm = wave_hbm, wo.wave_hbm_host = wave_hbm_host;
            wo.quest = seed_quest, wo.pq = seed_pq, wo.magicpig = seed_magicpig;
            wo.host_threads = host_threads;
            wo.launch_gate = launch_gate;
            wo.step_graph = step_graph;
            wo.sequences = sequences;
            std::string stopped;  // why the run stopped early, if it did
            wo.stop = [&] {
                const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
                if (stopped.empty() && g_stop_signal)
                    stopped = std::string(g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM") + " after " + num(elapsed) + " s";
                if (stopped.empty() && time_budget_s >= 0 && elapsed >= time_budget_s)
                    stopped = "the time budget (--time-budget " + num(time_budget_s) + " s) spent after " + num(elapsed) + " s";
                return !stopped.empty();
            };
            std::fprintf(stderr, "wave vs full per layer (kernels/run)...\n");
            const auto backend = gpu_run::make_cuda_backend();
            std::signal(SIGTERM, on_stop_signal);
            std::signal(SIGINT, on_stop_signal);
            const auto rows = gpu_run::run_wave_vs_full(*backend, wo, [&](const std::string& s) {
                // seconds since the process started: a lease's log says where its time went
                const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
                std::fprintf(stderr, "  [%6.1f s] %s\n", t, s.c_str());
            });
            std::signal(SIGTERM, SIG_DFL);
            std::signal(SIGINT, SIG_DFL);
            if (!stopped.empty()) {
                js << "  \"wave_run_stopped\": " << json_quote(stopped) << ",\n";
                txt << "wave run stopped early (" << stopped << "): the rows measured before it\n";
            }
            js << "  \"wave_run_model\": {\"dense\": " << json_quote(wo.dense_layer ? wo.dense.name : "")
               << ", \"layers\": " << wo.layers << ", \"kv_heads\": " << wo.layer.kv_heads << ", \"head_dim\": "
               << wo.layer.head_dim << ", \"device_memory_bytes\": " << (ceilings ? ceilings->memory_bytes : 0)
               << ", \"h2d_pinned_bytes_per_s\": " << num(ceilings ? ceilings->h2d_pinned_bytes_per_s : 0) << "},\n";
            // what every row shares: the index's k-means, the evaluated window, the sequences, the timing rule
            // (retro_bench.gpu.index_parity compares two runs' accuracy only over the same window)
            js << "  \"wave_run_options\": {\"kmeans\": " << json_quote(wo.kmeans_on_gpu ? "gpu" : "cpu")
               << ", \"steps\": " << wo.layer.steps << ", \"warm_steps\": " << wo.warm_steps
               << ", \"sequences\": " << wo.sequences << ", \"launch_gate\": " << (wo.launch_gate ? "true" : "false")
               << ", \"step_graph\": " << (wo.step_graph ? "true" : "false") << "},\n";
            js << "  \"wave_run_hardware\": " << json_quote(wo.hw ? hw.name : "") << ",\n  \"wave_run\": "
               << gpu_run::wave_run_json(rows) << ",\n";
            txt << "\nwave decode step vs full attention per layer (synthetic layer: " << wo.layer.kv_heads * wo.layer.group
                << " q / " << wo.layer.kv_heads << " kv heads, d=" << wo.layer.head_dim << "; times in us, means over "
                << wo.layer.steps - wo.warm_steps << " steps after " << wo.warm_steps
                << " that fill the cache; speed-ups from total_us = step_us + the admission after it"
                << (wo.launch_gate ? ", each step's launches queued behind a launch gate" : ", launch calls inside the timing")
                << (wo.step_graph ? ", full's and wave's device steps as one CUDA graph each (phases untimed)" : "")
                << "; model: the cost model on "
                << (wo.hw ? hw.name : std::string("no profile (--hardware)")) << ")\n"
                << gpu_run::wave_run_text(rows);
        } catch (const std::exception& e) {
            txt << "wave run failed: " << e.what() << "\n";
            js << "  \"wave_run_error\": " << json_quote(e.what()) << ",\n";
            ++failed;
        }
    }
    js << "  \"status\": " << json_quote(!have ? "skipped" : failed ? "failed" : "passed") << "\n}\n";
    for (const auto& [name, text] : {std::pair<std::string, std::string>{"gpu-report.json", js.str()},
                                      std::pair<std::string, std::string>{"gpu-report.txt", txt.str()}}) {
        std::ofstream f(out_dir + "/" + name);
        f << text;
        if (!f.flush()) {
            std::fprintf(stderr, "retro_gpu_check: cannot write %s/%s\n", out_dir.c_str(), name.c_str());
            return 2;
        }
    }
    std::fputs(txt.str().c_str(), stdout);
    if (!have) return 77;
    return failed ? 1 : 0;
}
