// `retro-bench throughput RESULTS_DIR`: the decode-throughput tables (system.throughput) and the
// system-model metrics (cache_hit, h2d/fetch bytes, model_us) of every run in a results directory;
// `--hardware` lists the hardware profiles.
#include <fmt/format.h>

#include <map>

#include "commands.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"
#include "system/hardware.hpp"

namespace retro::cli {
namespace {

using json = nlohmann::json;

std::string mean_text(const json& rec, const char* k, double scale, const char* fmtspec) {
    if (!rec.contains("metrics") || !rec["metrics"].contains(k) || !rec["metrics"][k]["mean"].is_number()) return "-";
    return fmt::format(fmt::runtime(fmtspec), rec["metrics"][k]["mean"].get<double>() * scale);
}

const CommandRegistrar reg(80, [](CLI::App& app) {
    auto* sub = app.add_subcommand("throughput", "Show system-model results (cache, PCIe, model_us, throughput tables)");
    auto dir = std::make_shared<std::string>();
    auto list_hw = std::make_shared<bool>(false);
    sub->add_option("results_dir", *dir, "a results directory (results/<name>)");
    sub->add_flag("--hardware", *list_hw, "list hardware profiles and their numbers");
    return std::function<int()>([dir, list_hw] {
        if (*list_hw) {
            for (const auto& n : list_hardware_profiles()) {
                const HardwareProfile h = load_hardware_profile(n);
                fmt::print("{:<18} PCIe {:>5.1f} GB/s  HBM {:>6.0f} GB/s  {:>6.1f} TFLOP/s  {:>5.1f} GiB  CPU {:>4.0f} cores "
                           "{:>6.1f} GB/s  - {}\n",
                           h.name, h.pcie_h2d_GBps, h.hbm_GBps, h.gpu_tflops, h.gpu_memory_GiB, h.cpu_cores,
                           h.dram_GBps, h.description);
            }
            return 0;
        }
        if (dir->empty()) throw ConfigError("throughput: give a results directory (or --hardware)");
        const std::string path = *dir + "/runs.jsonl";
        if (!file_exists(path)) throw ConfigError(path + " not found (run the config first)");
        const std::string text = read_file(path);
        size_t pos = 0;
        std::vector<json> recs;
        while (pos < text.size()) {
            size_t e = text.find('\n', pos);
            if (e == std::string::npos) e = text.size();
            if (e > pos) recs.push_back(json::parse(text.substr(pos, e - pos)));
            pos = e + 1;
        }
        fmt::print("{:<60} {:>9} {:>12} {:>12} {:>10}\n", "run", "cache_hit", "h2d KB/step", "fetch KB", "model_us");
        for (const auto& r : recs)
            fmt::print("{:<60} {:>9} {:>12} {:>12} {:>10}\n", r.value("label", std::string()).substr(0, 60),
                       mean_text(r, "cache_hit", 1, "{:.3f}"), mean_text(r, "h2d_bytes", 1e-3, "{:.1f}"),
                       mean_text(r, "fetch_bytes", 1e-3, "{:.1f}"), mean_text(r, "model_us", 1, "{:.1f}"));
        for (const auto& r : recs) {
            if (!r.contains("throughput")) continue;
            const json& t = r["throughput"];
            fmt::print("\n{}  [{} on {}, overlap {}]\n", r.value("label", std::string()).substr(0, 100),
                       t.value("model", std::string()), t.value("hardware", std::string()),
                       t.value("overlap", std::string()));
            std::map<int, std::vector<const json*>> by_ctx;
            for (const auto& row : t["rows"]) by_ctx[row["context"].get<int>()].push_back(&row);
            for (const auto& [ctx, rows] : by_ctx) {
                std::string line = fmt::format("  context {:>7}:", ctx);
                for (const json* row : rows)
                    line += (*row)["tokens_per_s"].is_number()
                                ? fmt::format("  B={} {:.0f}", (*row)["batch"].get<int>(), (*row)["tokens_per_s"].get<double>())
                                : fmt::format("  B={} oom", (*row)["batch"].get<int>());
                fmt::print("{}\n", line);
            }
        }
        return 0;
    });
});

}  // namespace
}  // namespace retro::cli
