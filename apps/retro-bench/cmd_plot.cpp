// `retro-bench plot RESULTS_DIR [MORE_DIRS...]` and `retro-bench report RESULTS_DIR [MORE_DIRS...]` (docs/plots.md):
// figures and the self-contained HTML report (more directories: their closed-loop runs join the closed-loop figures
// and tables, e.g. a second model). Both run the package's retro_bench.plotting (matplotlib; spawn.hpp) with
// RETRO_PYTHON or /usr/bin/python3 (Debian's python3-matplotlib), with an argument vector (no shell).
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "core/error.hpp"
#include "core/child_process.hpp"
#include "spawn.hpp"

namespace retro::cli {
namespace {

namespace fs = std::filesystem;

struct PlotArgs {
    std::vector<std::string> results;  // the first gets the output; the others add closed-loop runs
    std::string out;
    std::string format = "png,pdf";
    std::string only;
    std::vector<std::string> inspect;
    std::vector<std::string> heatmap_runs;
    int dpi = 0;
};

/// The Python interpreter: $RETRO_PYTHON, else /usr/bin/python3 (not the first python3 on PATH, which may
/// be a build without Debian's matplotlib; see scripts/env.sh).
std::string python_path() {
    const char* e = std::getenv("RETRO_PYTHON");
    return (e && *e) ? std::string(e) : std::string("/usr/bin/python3");
}

int run_script(const std::string& sub, const PlotArgs& a) {
    for (const auto& d : a.results) {
        std::error_code ec;
        if (!fs::is_directory(d, ec))
            throw Error("results directory " + d + " does not exist (run `retro-bench run CONFIG` first)");
    }
    const std::string py = python_path();
    std::vector<std::string> args = python_module_command(py, "retro_bench.plotting");
    args.push_back(sub);
    args.insert(args.end(), a.results.begin(), a.results.end());
    if (!a.out.empty()) args.insert(args.end(), {"--out", a.out});
    if (sub == "plot") {
        args.insert(args.end(), {"--format", a.format});
        if (a.dpi > 0) args.insert(args.end(), {"--dpi", std::to_string(a.dpi)});
    }
    if (!a.only.empty()) args.insert(args.end(), {"--only", a.only});
    for (const auto& f : a.inspect) args.insert(args.end(), {"--inspect", f});
    for (const auto& r : a.heatmap_runs) args.insert(args.end(), {"--heatmap-run", r});
    return run_child(args, {.what = "Python interpreter",
                            .hint = "install python3 and python3-matplotlib with bash scripts/setup.sh, or set "
                                    "RETRO_PYTHON"});
}

void add_common(CLI::App* sub, PlotArgs& a) {
    sub->add_option("results", a.results,
                    "results directory (results/<name>/); more directories after it add their closed-loop runs (other "
                    "models or contexts) to the closed-loop figures and tables, the output going to the first")
        ->required();
    sub->add_option("--inspect", a.inspect,
                    "a `retro-bench inspect TRACE --json FILE` output for the sparsity heatmap (repeatable; "
                    "*.json files in RESULTS_DIR are picked up too)")
        ->allow_extra_args(false);
    sub->add_option("--heatmap-run", a.heatmap_runs,
                    "run id(s) for the per-head out_err heatmap (default: one run per method near the median budget)")
        ->allow_extra_args(false);
    sub->add_option("--only", a.only, "comma-separated figure names (default: every figure that applies)");
}

const CommandRegistrar reg_plot(70, [](CLI::App& app) {
    auto a = std::make_shared<PlotArgs>();
    auto* sub = app.add_subcommand(
        "plot", "Draw every paper-style figure the results contain (PNG and PDF; docs/plots.md)");
    add_common(sub, *a);
    sub->add_option("--out", a->out, "output folder (default RESULTS_DIR/figures)");
    sub->add_option("--format", a->format, "comma-separated formats: png, pdf, svg (default png,pdf)");
    sub->add_option("--dpi", a->dpi, "PNG resolution (default 300)");
    return std::function<int()>([a] { return run_script("plot", *a); });
});

const CommandRegistrar reg_report(71, [](CLI::App& app) {
    auto a = std::make_shared<PlotArgs>();
    auto* sub = app.add_subcommand(
        "report", "Write one self-contained HTML report: figures, run tables, best per budget, manifest");
    add_common(sub, *a);
    sub->add_option("--out", a->out, "output file (default RESULTS_DIR/report.html)");
    return std::function<int()>([a] { return run_script("report", *a); });
});

}  // namespace
}  // namespace retro::cli
