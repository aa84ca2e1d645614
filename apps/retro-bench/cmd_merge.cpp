// `retro-bench merge RESULTS_DIR`: assemble a sharded sweep's summary files (docs/cluster.md).
#include <fmt/format.h>

#include "bench/merge.hpp"
#include "bench/summary.hpp"
#include "commands.hpp"

namespace retro::cli {
namespace {

const CommandRegistrar reg(11, [](CLI::App& app) {
    auto dir = std::make_shared<std::string>();
    auto* sub = app.add_subcommand("merge", "Merge the part files of a sharded sweep (run --shard I/N) into "
                                            "runs.jsonl, per_head.csv and manifest.json");
    sub->add_option("results_dir", *dir, "the sweep's results directory (<results root>/<config name>)")->required();
    return std::function<int()>([dir] {
        const MergeOutcome out = merge_results(*dir);
        fmt::print("{}", summary_table(out.records));
        fmt::print("\nmerged {} units from {} shard session file(s): {}/ (runs.jsonl, per_head.csv, manifest.json)\n",
                   out.units, out.shard_files, out.dir);
        return 0;
    });
});

}  // namespace
}  // namespace retro::cli
