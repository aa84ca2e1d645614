#include "run/synthetic_layer.hpp"

#include <random>

#include "core/threads.hpp"

namespace retro::gpu_run {

std::vector<HeadSlice> synthetic_layer(const SyntheticLayerParams& p) {
    const int d = p.head_dim, n = p.prompt + p.steps;
    std::vector<HeadSlice> heads((size_t)p.kv_heads);
    for_each_item(p.kv_heads, 0, [&](int h) {  // each head from its own generator: the same layer on any cores
        std::mt19937 rng(p.seed * 7919u + (unsigned)h);
        std::normal_distribution<float> N(0.0f, 1.0f);
        std::uniform_int_distribution<int> topic(0, p.topics - 1);
        std::geometric_distribution<int> run(1.0 / p.topic_run);
        std::bernoulli_distribution stay(p.stay);
        std::vector<float> centre((size_t)p.topics * d), offset((size_t)d);
        for (auto& x : centre) x = N(rng);
        for (auto& x : offset) x = 0.5f * N(rng);
        HeadSlice& s = heads[(size_t)h];
        s.layer = 0, s.kv_head = h, s.head_dim = d, s.prompt_len = p.prompt, s.num_steps = p.steps;
        s.group = p.group, s.first_q_head = h * p.group;
        s.keys.resize((size_t)n * d), s.values.resize((size_t)n * d);
        s.queries.resize((size_t)p.group * p.steps * d);
        for (int i = 0, left = 0, t = 0; i < n; ++i, --left) {  // runs of one topic, topics recurring
            if (left <= 0) left = 1 + run(rng), t = topic(rng);
            for (int e = 0; e < d; ++e) {
                s.keys[(size_t)i * d + e] = offset[e] + centre[(size_t)t * d + e] + 0.5f * N(rng);
                s.values[(size_t)i * d + e] = N(rng);
            }
        }
        for (int step = 0, focus = topic(rng); step < p.steps; ++step) {
            if (step > 0 && !stay(rng)) focus = topic(rng);
            for (int j = 0; j < p.group; ++j)
                for (int e = 0; e < d; ++e)
                    s.queries[((size_t)j * p.steps + step) * d + e] = p.focus * centre[(size_t)focus * d + e] + 0.5f * N(rng);
        }
    });
    return heads;
}

}  // namespace retro::gpu_run
