// `retro-bench synth OUT.h5 [...]`: generate a synthetic trace (docs/synth.md).
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>

#include "commands.hpp"
#include "core/error.hpp"
#include "core/host.hpp"
#include "trace/synth.hpp"
#include "trace/memory_estimates.hpp"

namespace retro::cli {
namespace {

using json = nlohmann::json;

struct SynthArgs {
    std::string out;
    std::string preset;
    std::string params_file;
    std::vector<std::string> sets;
    int prompt_len = -1, steps = -1, layers = -1, prefill = -1;
    std::string dtype;
    long long seed = -1;
    bool print_params = false;
    std::string max_memory;
};

/// --set key=value: the value is parsed as JSON when it is valid JSON, else taken as a string.
void apply_set(json& j, const std::string& kv) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
        throw ConfigError("--set expects key=value, got '" + kv + "'");
    const std::string key = kv.substr(0, eq), val = kv.substr(eq + 1);
    json v = json::parse(val, nullptr, false);
    j[key] = v.is_discarded() ? json(val) : v;
}

/// Builds the parameter JSON: --params file, then --preset and the shape flags, then --set.
SynthParams resolve(const SynthArgs& a) {
    json j = json::object();
    if (!a.params_file.empty()) {
        std::ifstream in(a.params_file);
        if (!in) throw ConfigError("cannot read --params file " + a.params_file);
        json f = json::parse(in, nullptr, false);
        if (f.is_discarded() || !f.is_object())
            throw ConfigError(a.params_file + ": expected a JSON object of synth parameters");
        j = f;
    }
    if (!a.preset.empty()) j["preset"] = a.preset;
    if (a.prompt_len >= 0) j["prompt_len"] = a.prompt_len;
    if (a.steps >= 0) j["decode_steps"] = a.steps;
    if (a.layers >= 0) j["num_layers"] = a.layers;
    if (a.prefill >= 0) j["prefill_queries"] = a.prefill;
    if (!a.dtype.empty()) j["dtype"] = a.dtype;
    if (a.seed >= 0) j["seed"] = a.seed;
    for (const auto& s : a.sets) apply_set(j, s);
    SynthParams p = SynthParams::from_json(j);
    p.validate();
    return p;
}

const CommandRegistrar reg(20, [](CLI::App& app) {
    auto a = std::make_shared<SynthArgs>();
    auto* sub = app.add_subcommand("synth", "Generate a synthetic attention trace (docs/synth.md)");
    sub->add_option("out", a->out, "output trace file (.h5)")->required();
    sub->add_option("--preset", a->preset, "model shape: llama3-8b (default) | smollm2");
    sub->add_option("--prompt-len", a->prompt_len, "prompt tokens (default 16384)");
    sub->add_option("--steps", a->steps, "decode steps (default 32)");
    sub->add_option("--layers", a->layers, "layers generated (default 2)");
    sub->add_option("--prefill-queries", a->prefill, "last prompt queries stored (default 64)");
    sub->add_option("--dtype", a->dtype, "float16 (default) | bfloat16 | float32");
    sub->add_option("--seed", a->seed, "random seed (default 1)");
    sub->add_option("--params", a->params_file, "JSON file of synth parameters (as in a config's \"synth\")");
    sub->add_option("--set", a->sets, "override one parameter: key=value (repeatable)");
    sub->add_flag("--print-params", a->print_params, "print the resolved parameters as JSON and exit");
    sub->add_option("--max-memory", a->max_memory,
                    "refuse to start when the estimated memory exceeds this, e.g. 8G (default: the available memory)");
    return std::function<int()>([a] {
        const SynthParams p = resolve(*a);
        if (a->print_params) {
            fmt::print("{}\n", p.to_json().dump(2));
            return 0;
        }
        check_memory(estimate_synth_memory(p, a->out), memory_limit(a->max_memory));  // before any work
        const auto parent = std::filesystem::path(a->out).parent_path();
        std::error_code mk;
        if (!parent.empty()) std::filesystem::create_directories(parent, mk);
        const auto t0 = std::chrono::steady_clock::now();
        synthesize(p, a->out);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::error_code ec;
        const auto bytes = std::filesystem::file_size(a->out, ec);
        fmt::print("wrote {}: synthetic-{} trace, {} layer(s) x {} q / {} kv heads, head_dim {}, prompt {} + {} "
                   "decode steps, {} prefill queries, {}, seed {}\n",
                   a->out, p.preset_name, p.num_layers, p.num_q_heads, p.num_kv_heads, p.head_dim, p.prompt_len,
                   p.decode_steps, p.prefill_queries, p.dtype, p.seed);
        fmt::print("  {:.1f} MiB in {:.2f} s, peak memory {:.0f} MiB (generated a KV head at a time)\n",
                   ec ? 0.0 : (double)bytes / (1024.0 * 1024.0), secs, peak_rss_bytes() / (1024.0 * 1024.0));
        return 0;
    });
});

}  // namespace
}  // namespace retro::cli
