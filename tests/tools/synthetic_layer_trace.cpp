// retro_synthetic_layer_trace: the GPU driver's synthetic timing layer (kernels/run/synthetic_layer.hpp)
// written as an HDF5 trace, so that `retro-bench run` can measure on it what it measures on a real trace
// — the GPU block cache's hit ratio above all (issue 40 #4: the layer's topic shift, 1 - stay, calibrated
// against real traces' cache locality; scripts/cache-locality.sh, docs/performance.md "Cache locality").
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "core/error.hpp"
#include "run/synthetic_layer.hpp"
#include "trace/writer.hpp"

int main(int argc, char** argv) {
    using namespace retro;
    gpu_run::SyntheticLayerParams p;
    std::string out;
    CLI::App app{"Write the GPU driver's synthetic layer (kernels/run/synthetic_layer.hpp) as a trace"};
    app.add_option("out", out, "trace file to write (.h5)")->required();
    app.add_option("--kv-heads", p.kv_heads, "KV heads")->capture_default_str()->check(CLI::Range(1, 64));
    app.add_option("--group", p.group, "query heads per KV head")->capture_default_str()->check(CLI::Range(1, 16));
    app.add_option("--head-dim", p.head_dim, "head dimension")->capture_default_str()->check(CLI::Range(8, 512));
    app.add_option("--prompt", p.prompt, "prompt tokens")->capture_default_str()->check(CLI::Range(64, 1 << 22));
    app.add_option("--steps", p.steps, "decode steps")->capture_default_str()->check(CLI::Range(1, 65536));
    app.add_option("--topics", p.topics, "topic centres per head")->capture_default_str()->check(CLI::Range(1, 1 << 20));
    app.add_option("--topic-run", p.topic_run, "mean tokens of a run of one topic")->capture_default_str()->check(CLI::Range(1, 1 << 20));
    app.add_option("--stay", p.stay, "probability that the query focus keeps its topic at the next step")
        ->capture_default_str()->check(CLI::Range(0.0, 1.0));
    app.add_option("--seed", p.seed, "random seed")->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    try {
        const std::vector<HeadSlice> heads = gpu_run::synthetic_layer(p);
        TraceInfo info;
        info.model = "synthetic-layer";
        info.num_layers = 1;
        info.num_q_heads = p.kv_heads * p.group;
        info.num_kv_heads = p.kv_heads;
        info.head_dim = p.head_dim;
        info.prompt_len = p.prompt;
        info.num_decode_steps = p.steps;
        info.source = "synthetic-layer:kernels/run/synthetic_layer.hpp stay=" + std::to_string(p.stay) +
                      " topics=" + std::to_string(p.topics) + " topic_run=" + std::to_string(p.topic_run) +
                      " seed=" + std::to_string(p.seed);
        info.dtype = DType::f16;
        TraceWriter w(out, info);
        w.begin_layer(0);
        for (const HeadSlice& h : heads) w.write_kv_head(0, h.kv_head, h.keys, h.values, h.queries);
        w.finish();
        std::printf("%s: synthetic layer, %d KV heads x %d, d %d, prompt %d + %d steps, stay %.3f\n", out.c_str(),
                    p.kv_heads, p.group, p.head_dim, p.prompt, p.steps, p.stay);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "retro_synthetic_layer_trace: error: %s\n", e.what());
        return 2;
    }
    return 0;
}
