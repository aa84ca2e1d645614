// Synthetic trace generator: determinism, shapes, parameter validation and JSON, RoPE really applied,
// the written file, and the statistical properties the generator promises (docs/synth.md), measured
// with the stats functions on small traces.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>

#include "attention/attention.hpp"
#include "core/error.hpp"
#include "trace/reader.hpp"
#include "trace/stats.hpp"
#include "scratch_dir.hpp"
#include "trace/synth.hpp"

using namespace retro;
using json = nlohmann::json;

namespace {

/// Small SmolLM2-shaped parameters (9 q / 3 kv heads, d = 64).
SynthParams tiny(uint64_t seed = 7) {
    SynthParams p = SynthParams::preset("smollm2");
    p.num_layers = 2;
    p.prompt_len = 1024;
    p.decode_steps = 8;
    p.prefill_queries = 16;
    p.seed = seed;
    return p;
}

/// Llama-3-8B head shape (d = 128, theta 5e5, GQA 4) with 2 KV heads, 4K prompt: the statistics test.
SynthParams small_llama() {
    SynthParams p = SynthParams::preset("llama3-8b");
    p.num_layers = 1;
    p.num_q_heads = 8;
    p.num_kv_heads = 2;
    p.prompt_len = 4096;
    p.decode_steps = 16;
    p.prefill_queries = 0;
    return p;
}

/// One SmolLM2-preset layer with sinks (sink_onset 0), 2K prompt, no prefill queries.
SynthParams smollm2_one_layer(int steps) {
    SynthParams p = SynthParams::preset("smollm2");
    p.num_layers = 1;
    p.sink_onset = 0.0;
    p.prompt_len = 2048;
    p.decode_steps = steps;
    p.prefill_queries = 0;
    return p;
}

/// inspect statistics of every query head of a generated layer.
std::vector<QHeadStats> all_head_stats(const SynthParams& p, const SynthLayer& L) {
    std::vector<QHeadStats> st;
    for (int g = 0; g < p.num_kv_heads; ++g) {
        const auto v = head_stats(synth_head_slice(p, L, g));
        st.insert(st.end(), v.begin(), v.end());
    }
    return st;
}

/// Calls f(weights [n], n) with the exact attention weights of every (query head, decode step) of a layer.
template <class F>
void for_each_attention(const SynthParams& p, const SynthLayer& L, F&& f) {
    std::vector<float> w;
    for (int g = 0; g < p.num_kv_heads; ++g) {
        const HeadSlice s = synth_head_slice(p, L, g);
        for (int q = 0; q < s.group; ++q)
            for (int t = 0; t < s.num_steps; ++t) {
                const int n = s.visible(t);
                w.resize((size_t)n);
                attention_scores(s.query(q, t), s.keys.data(), n, s.head_dim, 1.0f / std::sqrt((float)s.head_dim),
                                 w.data());
                softmax_inplace(w.data(), n);
                f(w.data(), n);
            }
    }
}

double cosine(const float* a, const float* b, int d) {
    double ab = 0, aa = 0, bb = 0;
    for (int j = 0; j < d; ++j) {
        ab += (double)a[j] * b[j];
        aa += (double)a[j] * a[j];
        bb += (double)b[j] * b[j];
    }
    return ab / std::sqrt(aa * bb);
}

}  // namespace

TEST(Synth, ShapesAndDeterminism) {
    const SynthParams p = tiny();
    const SynthLayer a = synthesize_layer(p, 1);
    const int n = p.n_tokens(), d = p.head_dim;
    EXPECT_EQ(a.layer, 1);
    EXPECT_EQ(a.keys.size(), (size_t)p.num_kv_heads * n * d);
    EXPECT_EQ(a.values.size(), (size_t)p.num_kv_heads * n * d);
    EXPECT_EQ(a.queries.size(), (size_t)p.num_q_heads * p.decode_steps * d);
    EXPECT_EQ(a.prefill_queries.size(), (size_t)p.num_q_heads * p.prefill_queries * d);
    EXPECT_EQ(a.heads.size(), (size_t)p.num_q_heads);
    for (float x : a.keys) ASSERT_TRUE(std::isfinite(x));
    for (float x : a.queries) ASSERT_TRUE(std::isfinite(x));

    const SynthLayer b = synthesize_layer(p, 1);  // same seed: bit-identical
    EXPECT_EQ(a.keys, b.keys);
    EXPECT_EQ(a.values, b.values);
    EXPECT_EQ(a.queries, b.queries);
    EXPECT_EQ(a.prefill_queries, b.prefill_queries);

    const int threads = omp_get_max_threads();  // independent of the thread count
    omp_set_num_threads(1);
    const SynthLayer one = synthesize_layer(p, 1);
    omp_set_num_threads(threads);
    EXPECT_EQ(a.keys, one.keys);
    EXPECT_EQ(a.queries, one.queries);

    const SynthLayer c = synthesize_layer(tiny(8), 1);  // other seed: different everywhere
    EXPECT_NE(a.keys, c.keys);
    EXPECT_NE(a.values, c.values);
    EXPECT_NE(a.queries, c.queries);
    const SynthLayer l0 = synthesize_layer(p, 0);  // other layer: different
    EXPECT_NE(a.keys, l0.keys);

    const HeadSlice s = synth_head_slice(p, a, 2);
    EXPECT_EQ(s.kv_head, 2);
    EXPECT_EQ(s.group, 3);
    EXPECT_EQ(s.first_q_head, 6);
    EXPECT_EQ(s.keys.size(), (size_t)n * d);
    EXPECT_EQ(s.queries.size(), (size_t)3 * p.decode_steps * d);
    EXPECT_EQ(s.num_prefill, 16);
    EXPECT_EQ(s.prefill_first_position, p.prompt_len - 16);
    EXPECT_EQ(s.key(5)[3], a.keys[((size_t)2 * n + 5) * d + 3]);
    EXPECT_EQ(s.query(1, 4)[0], a.queries[((size_t)7 * p.decode_steps + 4) * d]);
}

TEST(Synth, TextStructure) {
    SynthParams p = tiny();
    p.prompt_len = 8192;
    const SynthText t = synth_text(p);
    ASSERT_EQ(t.topic.size(), (size_t)p.n_tokens());
    ASSERT_EQ(t.needles.size(), (size_t)p.num_needles);
    for (int x : t.needles) {
        EXPECT_GE(x, p.sink_tokens);
        EXPECT_LT(x, p.prompt_len - p.local_window);
    }
    // Contiguous runs of mean length ~topic_run, and topics that recur after other topics.
    int runs = 1, recurring = 0;
    std::vector<int> seen_runs((size_t)t.num_topics, 0);
    seen_runs[(size_t)t.topic[0]] = 1;
    for (size_t i = 1; i < t.topic.size(); ++i)
        if (t.topic[i] != t.topic[i - 1]) {
            ++runs;
            if (seen_runs[(size_t)t.topic[i]]++ > 0) ++recurring;
        }
    const double mean_run = (double)t.topic.size() / runs;
    EXPECT_GT(mean_run, 0.6 * p.topic_run);
    EXPECT_LT(mean_run, 1.6 * p.topic_run);
    EXPECT_GT(recurring, runs / 3);  // topic_new_prob = 0.3: most switches go back to a seen topic
}

TEST(Synth, ValidateNamesParameterAndRange) {
    const auto expect_param_error = [](SynthParams p, const std::string& needle) {
        try {
            p.validate();
            ADD_FAILURE() << "expected ParamError mentioning " << needle;
        } catch (const ParamError& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    EXPECT_NO_THROW(SynthParams{}.validate());
    EXPECT_NO_THROW(SynthParams::preset("smollm2").validate());
    // Each case: one parameter set out of range on top of the defaults; the error names it.
    const std::vector<std::pair<std::string, std::function<void(SynthParams&)>>> cases = {
        {"num_kv_heads", [](SynthParams& p) { p.num_kv_heads = 5; }},
        {"head_dim", [](SynthParams& p) { p.head_dim = 63; }},
        {"prompt_len", [](SynthParams& p) { p.prompt_len = 4; }},
        {"sink_mass_min", [](SynthParams& p) { p.sink_mass_min = 0.6; }},
        {"dtype", [](SynthParams& p) { p.dtype = "float64"; }},
        {"focus_ar", [](SynthParams& p) { p.focus_ar = 1.5; }},
        {"prefill_queries", [](SynthParams& p) { p.prefill_queries = p.prompt_len + 1; }},
        {"decode_steps", [](SynthParams& p) { p.decode_steps = 0; }},
        {"num_needles", [](SynthParams& p) { p.prompt_len = 200; p.num_needles = 150; }},
        {"sink_mode", [](SynthParams& p) { p.sink_mode = "massive"; }},
        {"diffuse_layers", [](SynthParams& p) { p.diffuse_layers = p.num_layers + 1; }},
        {"sink_onset", [](SynthParams& p) { p.sink_onset = 1.5; }},
        {"key_mean_jitter", [](SynthParams& p) { p.key_mean_jitter = -0.1; }},
        {"recency_span_factor", [](SynthParams& p) { p.recency_span_factor = 0.5; }},
    };
    for (const auto& [name, set] : cases) {
        SynthParams p;
        set(p);
        expect_param_error(p, name);
    }
    EXPECT_THROW(SynthParams::preset("gpt5"), ParamError);
    // Errors say what the valid range is.
    SynthParams p;
    p.peaked_fraction = -0.1;
    try {
        p.validate();
        FAIL();
    } catch (const ParamError& e) {
        EXPECT_NE(std::string(e.what()).find("[0, 1]"), std::string::npos) << e.what();
    }
}

TEST(Synth, JsonPresetOverridesAndUnknownKeys) {
    const SynthParams p = SynthParams::from_json(json{{"preset", "smollm2"}, {"prompt_len", 2048}, {"seed", 9}});
    EXPECT_EQ(p.preset_name, "smollm2");
    EXPECT_EQ(p.num_q_heads, 9);
    EXPECT_EQ(p.num_kv_heads, 3);
    EXPECT_EQ(p.head_dim, 64);
    EXPECT_DOUBLE_EQ(p.rope_theta, 100000.0);
    EXPECT_EQ(p.prompt_len, 2048);
    EXPECT_EQ(p.seed, 9u);
    const SynthParams d = SynthParams::from_json(json::object());
    EXPECT_EQ(d.preset_name, "llama3-8b");
    EXPECT_EQ(d.num_q_heads, 32);
    EXPECT_DOUBLE_EQ(d.rope_theta, 500000.0);
    EXPECT_EQ(d.num_layers, 2);
    EXPECT_EQ(d.prompt_len, 16384);
    EXPECT_EQ(d.decode_steps, 32);
    EXPECT_EQ(d.prefill_queries, 64);
    EXPECT_EQ(d.dtype, "float16");

    // Round trip: to_json -> from_json gives the same JSON.
    SynthParams q = tiny();
    q.needle_z = 4.5;
    q.dtype = "bfloat16";
    EXPECT_EQ(SynthParams::from_json(q.to_json()).to_json(), q.to_json());

    try {
        SynthParams::from_json(json{{"prompt_len", 100}, {"promt_len", 3}});
        FAIL() << "unknown key accepted";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("promt_len"), std::string::npos) << e.what();
    }
    EXPECT_THROW(SynthParams::from_json(json{{"prompt_len", "long"}}), ConfigError);
    EXPECT_THROW(SynthParams::from_json(json{{"prompt_len", 1.5}}), ConfigError);
    EXPECT_THROW(SynthParams::from_json(json{{"seed", -1}}), ConfigError);
    EXPECT_THROW(SynthParams::from_json(json{{"preset", "nope"}}), ConfigError);
    EXPECT_THROW(SynthParams::from_json(json::array()), ConfigError);
}

TEST(Synth, RopeIsAppliedHalfSplit) {
    // Keys share a constant pre-RoPE mean vector. After RoPE its high-frequency pairs rotate with the
    // position and average out over tokens; undoing the rotation (half_split, theta from the preset)
    // brings the constant back.
    SynthParams p = tiny();
    p.num_layers = 1;
    const SynthLayer L = synthesize_layer(p, 0);
    const int d = p.head_dim, P = d / 2, n = p.n_tokens();
    const float* K = L.keys.data();  // KV head 0
    double post = 0, pre = 0;
    for (int j = 0; j < P / 4; ++j) {  // the highest-frequency quarter of the pairs
        const double w = std::pow(p.rope_theta, -2.0 * j / d);
        double mx = 0, my = 0, ux = 0, uy = 0;
        for (int i = p.sink_tokens; i < n; ++i) {
            const double x = K[(size_t)i * d + j], y = K[(size_t)i * d + j + P];
            mx += x;
            my += y;
            const double c = std::cos(-w * i), s = std::sin(-w * i);
            ux += x * c - y * s;  // inverse rotation by the token's position
            uy += y * c + x * s;
        }
        const int m = n - p.sink_tokens;
        post += std::hypot(mx / m, my / m);
        pre += std::hypot(ux / m, uy / m);
    }
    EXPECT_GT(pre, 10 * post) << "pre-RoPE mean norm " << pre << ", post-RoPE " << post;
    EXPECT_GT(pre / (P / 4), 1.0);  // ~key_mean * sqrt(2) per pair

    // Positional locality: neighbouring keys are more similar than distant ones.
    double near = 0, far = 0;
    int cnt = 0;
    for (int i = 64; i + 1 < n - 512; i += 7) {
        near += cosine(K + (size_t)i * d, K + (size_t)(i + 1) * d, d);
        far += cosine(K + (size_t)i * d, K + (size_t)(i + 512) * d, d);
        ++cnt;
    }
    EXPECT_GT(near / cnt, far / cnt + 0.1) << "near " << near / cnt << " far " << far / cnt;
}

TEST(Synth, WritesReadableTrace) {
    retro::test::ScratchDir dir;
    SynthParams p = tiny();
    p.prompt_len = 600;
    p.decode_steps = 6;
    const std::string path = dir.path + "/t.h5";
    synthesize(p, path);
    TraceReader r(path);
    const TraceInfo& info = r.info();
    EXPECT_EQ(info.model, "synthetic-smollm2");
    EXPECT_EQ(info.source.rfind("synthetic:retro-synth v1 {", 0), 0u) << info.source;
    EXPECT_EQ(SynthParams::from_json(json::parse(info.source.substr(info.source.find('{')))).to_json(),
              p.to_json());
    EXPECT_EQ(info.num_q_heads, 9);
    EXPECT_EQ(info.num_kv_heads, 3);
    EXPECT_EQ(info.head_dim, 64);
    EXPECT_EQ(info.prompt_len, 600);
    EXPECT_EQ(info.num_decode_steps, 6);
    EXPECT_TRUE(info.rope_applied);
    EXPECT_EQ(info.rope_layout, "half_split");
    EXPECT_DOUBLE_EQ(info.rope_theta, 100000.0);
    EXPECT_EQ(info.dtype, DType::f16);
    EXPECT_EQ(info.layers, (std::vector<int>{0, 1}));
    EXPECT_EQ(info.num_prefill_queries, 16);
    EXPECT_EQ(info.prefill_first_position, 584);
    const TraceInfo expect = synth_trace_info(p);
    EXPECT_EQ(expect.source, info.source);
    EXPECT_EQ(expect.layers, info.layers);

    const SynthLayer L = synthesize_layer(p, 1);
    const HeadSlice mem = synth_head_slice(p, L, 1);
    const HeadSlice file = r.read_head(1, 1);
    ASSERT_EQ(mem.keys.size(), file.keys.size());
    ASSERT_EQ(mem.queries.size(), file.queries.size());
    ASSERT_EQ(mem.prefill_queries.size(), file.prefill_queries.size());
    for (size_t i = 0; i < mem.keys.size(); ++i)
        ASSERT_NEAR(mem.keys[i], file.keys[i], 1e-3 * std::abs(mem.keys[i]) + 1e-4);
    for (size_t i = 0; i < mem.queries.size(); ++i)
        ASSERT_NEAR(mem.queries[i], file.queries[i], 1e-3 * std::abs(mem.queries[i]) + 1e-4);
    for (size_t i = 0; i < mem.prefill_queries.size(); ++i)
        ASSERT_NEAR(mem.prefill_queries[i], file.prefill_queries[i], 1e-3 * std::abs(mem.prefill_queries[i]) + 1e-4);
}

TEST(Synth, RealisticAttentionStatistics) {
    const SynthParams p = small_llama();
    const SynthLayer L = synthesize_layer(p, 0);
    const std::vector<QHeadStats> st = all_head_stats(p, L);
    ASSERT_EQ(st.size(), (size_t)p.num_q_heads);
    const QHeadStats m = mean_stats(st);
    // Attention sinks draw a large share (targets 10-50% per head).
    EXPECT_GT(m.sink_mass, 0.12);
    EXPECT_LT(m.sink_mass, 0.6);
    for (const auto& s : st) EXPECT_GT(s.sink_mass, 0.01) << "q head " << s.q_head;
    // Recency: the last 64 of ~4100 tokens (1.6%) hold clearly more than their share.
    EXPECT_GT(m.local_mass, 0.04);
    // Queries are out of distribution for the keys (RetrievalAttention: > 10x at 128 dims).
    EXPECT_GT(m.ood_ratio, 5.0);
    for (const auto& s : st) EXPECT_GT(s.ood_ratio, 3.0) << "q head " << s.q_head;
    // Smooth drift: consecutive top-100 sets overlap strongly but not completely; consecutive queries
    // are very similar (CTKVR Obs. 1).
    EXPECT_GT(m.overlap, 0.6);
    EXPECT_LT(m.overlap, 0.97);
    EXPECT_GT(m.query_cos, 0.9);
    // A reused top-1% set loses mass at later steps (RetrievalAttention Fig. 2).
    EXPECT_LT(m.static_top_frac_mass, m.top_frac_mass - 0.03);
    // Sparsity: top 1% of tokens hold most of the mass on average.
    EXPECT_GT(m.top_frac_mass, 0.6);
    // The sharpest head needs far fewer tokens for 90% of the mass than the most diffuse one.
    int sharp = 0, diffuse = 0;
    for (int h = 0; h < p.num_q_heads; ++h) {
        if (L.heads[(size_t)h].sharpness > L.heads[(size_t)sharp].sharpness) sharp = h;
        if (L.heads[(size_t)h].sharpness < L.heads[(size_t)diffuse].sharpness) diffuse = h;
    }
    EXPECT_GT(L.heads[(size_t)sharp].sharpness, L.heads[(size_t)diffuse].sharpness + 1.0);
    EXPECT_LT(st[(size_t)sharp].f90 * 5, st[(size_t)diffuse].f90)
        << "sharp head f90 " << st[(size_t)sharp].f90 << ", diffuse " << st[(size_t)diffuse].f90;
}

TEST(Synth, HeadMixFollowsPeakedFraction) {
    // Heads range from diffuse (>= ~5% of tokens for 90% of the mass) to very peaked (< 1%).
    SynthParams p = small_llama();
    p.num_q_heads = 16;
    p.num_kv_heads = 4;
    p.decode_steps = 4;
    const SynthLayer L = synthesize_layer(p, 0);
    int peaked = 0, diffuse = 0;
    for (int g = 0; g < p.num_kv_heads; ++g)
        for (const auto& s : head_stats(synth_head_slice(p, L, g))) {
            if (s.f90 < 0.01) ++peaked;
            if (s.f90 > 0.05) ++diffuse;
        }
    EXPECT_GE(peaked, 3);
    EXPECT_GE(diffuse, 1);

    p.prompt_len = 512;
    p.peaked_fraction = 0.0;  // all heads diffuse
    const SynthLayer D = synthesize_layer(p, 0);
    for (const auto& h : D.heads) EXPECT_FALSE(h.peaked);
    p.peaked_fraction = 1.0;
    const SynthLayer S = synthesize_layer(p, 0);
    for (const auto& h : S.heads) EXPECT_TRUE(h.peaked);
}

TEST(Synth, NeedlesAreTargeted) {
    // Some head at some step puts a large weight on a needle token far from the end.
    SynthParams p = small_llama();
    p.needle_rate = 0.3;
    const SynthLayer L = synthesize_layer(p, 0);
    const SynthText text = synth_text(p);
    double best = 0;
    for_each_attention(p, L, [&](const float* w, int) {
        for (int x : text.needles) best = std::max(best, (double)w[(size_t)x]);
    });
    EXPECT_GT(best, 0.2);
}

TEST(Synth, SmallHeadsStayPhysical) {
    // head_dim 16 leaves few RoPE pairs for the recency carrier: unreachable targets must not blow up the
    // fitted coefficients (they are capped), and the trace must stay storable in float16.
    SynthParams p = SynthParams::preset("llama3-8b");
    p.num_layers = 1;
    p.num_q_heads = 4;
    p.num_kv_heads = 2;
    p.head_dim = 16;
    p.prompt_len = 2000;
    p.decode_steps = 3;
    p.local_mass_min = 0.9;
    p.local_mass_max = 0.95;
    const SynthLayer L = synthesize_layer(p, 0);
    for (const auto& h : L.heads) {
        EXPECT_LT(h.lambda, 1e3);
        EXPECT_LT(h.sink_coef, 1e3);
    }
    for (float x : L.queries) ASSERT_LT(std::abs(x), 6e4f);
    for (float x : L.keys) ASSERT_LT(std::abs(x), 6e4f);
    const auto st = head_stats(synth_head_slice(p, L, 0));
    for (const auto& s : st) EXPECT_LT(s.ood_ratio, 1e3);
}

TEST(Synth, MeanSinksHeavyHittersAndLayerProfile) {
    // The smollm2 preset: sinks won by queries pointing away from the low-band key mean that the sink
    // keys lack; no sinks in the lower 40% of the layers; layer 0 all diffuse (docs/synth.md).
    SynthParams p = SynthParams::preset("smollm2");
    ASSERT_EQ(p.sink_mode, "mean");
    p.num_layers = 5;  // sink_onset 0.4: layers 0 and 1 without sinks
    p.prompt_len = 2048;
    p.decode_steps = 6;
    p.prefill_queries = 0;
    const int d = p.head_dim;
    for (int layer = 0; layer < p.num_layers; ++layer) {
        const SynthLayer L = synthesize_layer(p, layer);
        const bool sinks = layer >= 2;
        double sink = 0, anti = 0;
        int nq = 0;
        for (int g = 0; g < p.num_kv_heads; ++g) {
            const HeadSlice s = synth_head_slice(p, L, g);
            // key mean of the ordinary tokens; the sink token 0 carries far less of it
            std::vector<double> mu((size_t)d, 0.0);
            for (int i = p.sink_tokens; i < p.prompt_len; ++i)
                for (int j = 0; j < d; ++j) mu[(size_t)j] += s.keys[(size_t)i * d + j] / (p.prompt_len - p.sink_tokens);
            double mm = 0, k0 = 0;
            for (int j = 0; j < d; ++j) {
                mm += mu[(size_t)j] * mu[(size_t)j];
                k0 += mu[(size_t)j] * s.keys[(size_t)j];
            }
            EXPECT_LT(k0 / mm, 0.5) << "layer " << layer << " kv " << g << ": sink key along the key mean";
            for (const auto& st : head_stats(s)) {
                sink += st.sink_mass;
                ++nq;
            }
            for (int q = 0; q < s.group; ++q) {
                double qm = 0;
                for (int j = 0; j < d; ++j) qm += s.query(q, 0)[j] * mu[(size_t)j];
                anti += qm / std::sqrt(mm);
            }
        }
        sink /= nq;
        anti /= nq;
        if (sinks) {
            EXPECT_GT(sink, 0.15) << "layer " << layer;  // targets U(0.2, 0.95)
            EXPECT_LT(anti, -1.0) << "layer " << layer << ": queries point away from the key mean";
        } else {
            EXPECT_LT(sink, 0.02) << "layer " << layer;
        }
        for (const auto& h : L.heads) {
            if (layer == 0) {
                EXPECT_FALSE(h.peaked);
                EXPECT_LE(h.sharpness, p.diffuse_sharpness + 1e-12);
                EXPECT_GE(h.sharpness, 0.5 * p.diffuse_sharpness - 1e-12);
            }
            EXPECT_EQ(h.sink_target == 0.0, !sinks) << "layer " << layer;
        }
    }
}

TEST(Synth, KeyMeanJitterMakesHeavyHitters) {
    // Tokens carrying less of the key mean are attended by every sink-seeking query: the top-1% set is
    // more stable across steps with the jitter than without it.
    const SynthParams p = smollm2_one_layer(16);
    const auto stable = [&](double jitter) {
        SynthParams q = p;
        q.key_mean_jitter = jitter;
        return mean_stats(all_head_stats(q, synthesize_layer(q, 0))).static_top_frac_mass;
    };
    const double with = stable(0.3), without = stable(0.0);
    EXPECT_GT(with, without + 0.1) << "static top-1% mass with jitter " << with << ", without " << without;
}

TEST(Synth, RecencySpanGivesTheRecencyKernelATail) {
    // Lower carrier frequencies (recency_span_factor) move attention mass to 64-512 tokens back, as in the
    // real SmolLM2 trace (docs/traces.md: 0.10 of the mass there; 4 -> 0.015, 64 -> 0.11 on 30 layers).
    const SynthParams p = smollm2_one_layer(4);
    const auto band_mass = [&](double factor) {
        SynthParams q = p;
        q.recency_span_factor = factor;
        double acc = 0;
        int cnt = 0;
        for_each_attention(q, synthesize_layer(q, 0), [&](const float* w, int n) {
            for (int i = n - 512; i < n - 64; ++i) acc += w[(size_t)i];
            ++cnt;
        });
        return acc / cnt;
    };
    const double short_tail = band_mass(4.0), long_tail = band_mass(64.0);
    EXPECT_GT(long_tail, 2.0 * short_tail) << "mass 64-512 back: factor 4 " << short_tail << ", 64 " << long_tail;
    EXPECT_GT(long_tail, 0.03);
}

TEST(Synth, NeedleSpansArePassagesSharingTheNeedleKey) {
    SynthParams p = tiny();
    p.needle_span = 12;
    p.num_needles = 6;
    const SynthText text = synth_text(p);
    ASSERT_EQ((int)text.needles.size(), p.num_needles);
    for (size_t k = 0; k < text.needles.size(); ++k) {
        EXPECT_GE(text.needles[k], p.sink_tokens);
        EXPECT_LE(text.needles[k] + p.needle_span, p.prompt_len - p.local_window);
        if (k > 0) {
            EXPECT_GE(text.needles[k] - text.needles[k - 1], p.needle_span) << "needles overlap";
        }
    }
    // Every token of a passage carries the needle's key direction: neighbours inside a passage are far
    // more alike (centered cosine) than a passage token and the token just before the passage.
    const SynthLayer L = synthesize_layer(p, 0);
    const HeadSlice s = synth_head_slice(p, L, 0);
    const int d = p.head_dim;
    std::vector<double> mu((size_t)d, 0.0);
    for (int i = 0; i < p.prompt_len; ++i)
        for (int j = 0; j < d; ++j) mu[(size_t)j] += s.keys[(size_t)i * d + j] / p.prompt_len;
    const auto ccos = [&](int a, int b) {
        std::vector<float> x((size_t)d), y((size_t)d);
        for (int j = 0; j < d; ++j) {
            x[(size_t)j] = (float)(s.keys[(size_t)a * d + j] - mu[(size_t)j]);
            y[(size_t)j] = (float)(s.keys[(size_t)b * d + j] - mu[(size_t)j]);
        }
        return cosine(x.data(), y.data(), d);
    };
    double inside = 0, across = 0;
    for (int x : text.needles) {
        inside += ccos(x + p.needle_span / 2, x + p.needle_span / 2 + 1) / p.num_needles;
        across += ccos(x - 1, x) / p.num_needles;
    }
    EXPECT_GT(inside, across + 0.2) << "inside a passage " << inside << ", across its start " << across;
    // Room: spans may fill at most half of [sink_tokens, prompt_len - local_window).
    p.num_needles = (p.prompt_len - p.local_window - p.sink_tokens) / (2 * p.needle_span) + 1;
    EXPECT_THROW(p.validate(), ParamError);
}
