// SynthParams: JSON in and out (every field, by name) and validation (each parameter's range, then the
// constraints between parameters). The presets are in synth_presets.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.hpp"
#include "trace/synth.hpp"
#include "trace/synth_bands.hpp"

namespace retro {

using json = nlohmann::json;

namespace {

/// Calls f(name, field&) for every parameter, in documentation order. P is SynthParams or const SynthParams.
template <class P, class F>
void for_each_field(P& p, F&& f) {
    f("preset", p.preset_name);
    f("num_layers", p.num_layers);
    f("num_q_heads", p.num_q_heads);
    f("num_kv_heads", p.num_kv_heads);
    f("head_dim", p.head_dim);
    f("rope_theta", p.rope_theta);
    f("prompt_len", p.prompt_len);
    f("decode_steps", p.decode_steps);
    f("prefill_queries", p.prefill_queries);
    f("dtype", p.dtype);
    f("seed", p.seed);
    f("sink_tokens", p.sink_tokens);
    f("sink_mode", p.sink_mode);
    f("sink_mass_min", p.sink_mass_min);
    f("sink_mass_max", p.sink_mass_max);
    f("local_window", p.local_window);
    f("local_mass_min", p.local_mass_min);
    f("local_mass_max", p.local_mass_max);
    f("recency_span_factor", p.recency_span_factor);
    f("sharp_min", p.sharp_min);
    f("sharp_max", p.sharp_max);
    f("peaked_fraction", p.peaked_fraction);
    f("diffuse_layers", p.diffuse_layers);
    f("diffuse_sharpness", p.diffuse_sharpness);
    f("sink_onset", p.sink_onset);
    f("topic_run", p.topic_run);
    f("topic_new_prob", p.topic_new_prob);
    f("topic_share", p.topic_share);
    f("vocab_size", p.vocab_size);
    f("word_share", p.word_share);
    f("key_salience_sigma", p.key_salience_sigma);
    f("focus_ar", p.focus_ar);
    f("gqa_shared", p.gqa_shared);
    f("query_offset", p.query_offset);
    f("num_needles", p.num_needles);
    f("needle_rate", p.needle_rate);
    f("needle_persist", p.needle_persist);
    f("needle_head_fraction", p.needle_head_fraction);
    f("needle_z", p.needle_z);
    f("needle_span", p.needle_span);
    f("key_mean", p.key_mean);
    f("key_mean_low_gain", p.key_mean_low_gain);
    f("key_mean_jitter", p.key_mean_jitter);
    f("key_noise", p.key_noise);
    f("query_noise_gain", p.query_noise_gain);
    f("value_mean", p.value_mean);
    f("value_topic", p.value_topic);
    f("value_noise", p.value_noise);
    f("sink_value_scale", p.sink_value_scale);
    f("needle_value", p.needle_value);
}

/// Sets `field` from the JSON value `val` of key `key`, checking the JSON type against the field's.
template <class T>
void set_field(T& field, const std::string& key, const json& val) {
    const auto bad = [&](const char* want) {
        throw ConfigError("synth params: \"" + key + "\" must be " + want + ", got " + val.dump());
    };
    if constexpr (std::is_same_v<T, std::string>) {
        if (!val.is_string()) bad("a string");
        field = val.get<std::string>();
    } else if constexpr (std::is_same_v<T, double>) {
        if (!val.is_number()) bad("a number");
        field = val.get<double>();
    } else {  // int or uint64_t
        if (!val.is_number()) bad("an integer");
        const double d = val.get<double>();
        if (val.is_number_float() && d != std::floor(d)) bad("an integer");
        if constexpr (std::is_same_v<T, uint64_t>) {
            if (d < 0) bad("a non-negative integer");
            field = val.is_number_unsigned() ? val.get<uint64_t>() : (uint64_t)d;
        } else {
            if (d < (double)std::numeric_limits<int>::min() || d > (double)std::numeric_limits<int>::max())
                bad("a 32-bit integer");
            field = (int)d;
        }
    }
}

std::string fmt_num(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

/// Range checks that throw ParamError naming the parameter, its value and the valid range.
void fail(const std::string& name, const std::string& val, const std::string& range) {
    throw ParamError("synth parameter " + name + " = " + val + " is out of range: expected " + range);
}
void irange(const char* name, long long v, long long lo, long long hi) {
    if (v < lo || v > hi) fail(name, std::to_string(v), std::to_string(lo) + " .. " + std::to_string(hi));
}
void rrange(const char* name, double v, double lo, double hi, bool lo_open = false) {
    if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo))
        fail(name, fmt_num(v), (lo_open ? "(" : "[") + fmt_num(lo) + ", " + fmt_num(hi) + "]");
}
void ordered(const char* lo_name, double lo, const char* hi_name, double hi) {
    if (lo > hi)
        throw ParamError(std::string("synth parameters ") + lo_name + " = " + fmt_num(lo) + " and " + hi_name +
                         " = " + fmt_num(hi) + ": expected " + lo_name + " <= " + hi_name);
}

// The checks below run in documentation order: the first bad parameter is the one reported.

void check_shape(const SynthParams& p) {
    bool known_preset = false;
    for (const auto& n : SynthParams::preset_names()) known_preset |= n == p.preset_name;
    if (!known_preset) fail("preset", "'" + p.preset_name + "'", "llama3-8b or smollm2");
    irange("num_layers", p.num_layers, 1, 1024);
    irange("num_q_heads", p.num_q_heads, 1, 1024);
    irange("num_kv_heads", p.num_kv_heads, 1, 1024);
    if (p.num_q_heads % p.num_kv_heads != 0)
        throw ParamError("synth parameters num_q_heads = " + std::to_string(p.num_q_heads) +
                         " and num_kv_heads = " + std::to_string(p.num_kv_heads) +
                         ": num_kv_heads must divide num_q_heads");
    irange("head_dim", p.head_dim, 16, 512);
    if (p.head_dim % 2 != 0) fail("head_dim", std::to_string(p.head_dim), "an even number in 16 .. 512");
    rrange("rope_theta", p.rope_theta, 2.0, 1e12);
    irange("prompt_len", p.prompt_len, 16, 1 << 23);
    irange("decode_steps", p.decode_steps, 1, 1 << 20);
    irange("prefill_queries", p.prefill_queries, 0, p.prompt_len);
    if (p.dtype != "float16" && p.dtype != "bfloat16" && p.dtype != "float32")
        fail("dtype", "'" + p.dtype + "'", "float16, bfloat16 or float32");
}

/// Sinks, recency, head sparsity, layer profile.
void check_attention(const SynthParams& p) {
    irange("sink_tokens", p.sink_tokens, 0, std::max(0, p.prompt_len / 4));
    if (p.sink_mode != "offset" && p.sink_mode != "mean") fail("sink_mode", "'" + p.sink_mode + "'", "offset or mean");
    rrange("sink_mass_min", p.sink_mass_min, 0.0, 0.95);
    rrange("sink_mass_max", p.sink_mass_max, 0.0, 0.95);
    ordered("sink_mass_min", p.sink_mass_min, "sink_mass_max", p.sink_mass_max);
    irange("local_window", p.local_window, 2, std::max(2, p.prompt_len / 2));
    rrange("local_mass_min", p.local_mass_min, 0.0, 0.95);
    rrange("local_mass_max", p.local_mass_max, 0.0, 0.95);
    ordered("local_mass_min", p.local_mass_min, "local_mass_max", p.local_mass_max);
    rrange("recency_span_factor", p.recency_span_factor, 1.0, 1e6);
    rrange("sharp_min", p.sharp_min, 0.0, 20.0, true);
    rrange("sharp_max", p.sharp_max, 0.0, 20.0, true);
    ordered("sharp_min", p.sharp_min, "sharp_max", p.sharp_max);
    rrange("peaked_fraction", p.peaked_fraction, 0.0, 1.0);
    irange("diffuse_layers", p.diffuse_layers, 0, p.num_layers);
    rrange("diffuse_sharpness", p.diffuse_sharpness, 0.0, 20.0, true);
    rrange("sink_onset", p.sink_onset, 0.0, 1.0);
}

/// Text (topics, words, needles), queries and magnitudes.
void check_content(const SynthParams& p) {
    rrange("topic_run", p.topic_run, 1.0, 1e9);
    rrange("topic_new_prob", p.topic_new_prob, 0.0, 1.0);
    rrange("topic_share", p.topic_share, 0.0, 1.0);
    irange("vocab_size", p.vocab_size, 1, 1 << 24);
    rrange("word_share", p.word_share, 0.0, 1.0);
    if (p.topic_share + p.word_share > 1.0 + 1e-12)
        throw ParamError("synth parameters topic_share = " + fmt_num(p.topic_share) + " and word_share = " +
                         fmt_num(p.word_share) + ": expected topic_share + word_share <= 1");
    rrange("key_salience_sigma", p.key_salience_sigma, 0.0, 2.0);
    rrange("focus_ar", p.focus_ar, 0.0, 1.0);
    rrange("gqa_shared", p.gqa_shared, 0.0, 1.0);
    rrange("query_offset", p.query_offset, 0.0, 1e4);
    irange("num_needles", p.num_needles, 0, 1 << 20);
    rrange("needle_rate", p.needle_rate, 0.0, 1.0);
    rrange("needle_persist", p.needle_persist, 0.0, 1.0);
    rrange("needle_head_fraction", p.needle_head_fraction, 0.0, 1.0);
    rrange("needle_z", p.needle_z, 0.0, 50.0);
    rrange("key_mean", p.key_mean, 0.0, 100.0);
    rrange("key_mean_low_gain", p.key_mean_low_gain, 0.0, 100.0);
    rrange("key_mean_jitter", p.key_mean_jitter, 0.0, 10.0);
    rrange("key_noise", p.key_noise, 0.0, 100.0);
    rrange("query_noise_gain", p.query_noise_gain, 0.0, 100.0);
    rrange("value_mean", p.value_mean, 0.0, 100.0);
    rrange("value_topic", p.value_topic, 0.0, 100.0);
    rrange("value_noise", p.value_noise, 0.0, 100.0);
    rrange("sink_value_scale", p.sink_value_scale, 0.0, 100.0);
    rrange("needle_value", p.needle_value, 0.0, 100.0);
    irange("needle_span", p.needle_span, 1, 4096);
}

/// Constraints that need several parameters at once: room for the needles, width of the semantic band.
void check_fit(const SynthParams& p) {
    // Room for the needles: positions [sink_tokens, prompt_len - local_window); spans of more than one
    // token may fill at most half of it (they are placed without overlap by rejection).
    const int room = p.prompt_len - p.local_window - p.sink_tokens;
    const int max_needles = p.needle_span == 1 ? std::max(0, room) : std::max(0, room / (2 * p.needle_span));
    if (p.num_needles > max_needles)
        throw ParamError("synth parameter num_needles = " + std::to_string(p.num_needles) +
                         " is out of range: expected 0 .. " + std::to_string(max_needles) +
                         " (needles of needle_span = " + std::to_string(p.needle_span) +
                         " tokens sit in [sink_tokens, prompt_len - local_window))");
    const synth_detail::Bands b = synth_detail::make_bands(p);
    if (b.s_pairs() < 4)
        throw ParamError("synth parameters head_dim = " + std::to_string(p.head_dim) + ", local_window = " +
                         std::to_string(p.local_window) + ": the semantic RoPE band has " +
                         std::to_string(b.s_pairs()) + " pairs, expected >= 4 (increase head_dim)");
}

}  // namespace

json SynthParams::to_json() const {
    json j = json::object();
    for_each_field(*this, [&](const char* name, const auto& v) { j[name] = v; });
    return j;
}

SynthParams SynthParams::from_json(const json& j) {
    if (!j.is_object()) throw ConfigError("synth params: expected a JSON object, got " + j.dump());
    SynthParams p;
    if (j.contains("preset")) {
        if (!j["preset"].is_string()) throw ConfigError("synth params: \"preset\" must be a string");
        try {
            p = preset(j["preset"].get<std::string>());
        } catch (const ParamError& e) {
            throw ConfigError(std::string("synth params: ") + e.what());
        }
    }
    for (const auto& item : j.items()) {
        // named, not a structured binding: clang 14 (the fuzz build) cannot capture one in a lambda
        const std::string& key = item.key();
        const json& val = item.value();
        if (key == "preset") continue;
        bool found = false;
        for_each_field(p, [&](const char* name, auto& field) {
            if (key != name) return;
            found = true;
            set_field(field, key, val);
        });
        if (!found) {
            std::string list;
            for_each_field(p, [&](const char* name, auto&) { list += (list.empty() ? "" : ", ") + std::string(name); });
            throw ConfigError("synth params: unknown key \"" + key + "\" (known keys: " + list + ")");
        }
    }
    return p;
}

void SynthParams::validate() const {
    check_shape(*this);
    check_attention(*this);
    check_content(*this);
    check_fit(*this);
}

}  // namespace retro
