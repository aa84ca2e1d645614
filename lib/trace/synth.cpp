#include "trace/synth.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include "attention/attention.hpp"
#include "core/error.hpp"
#include "trace/writer.hpp"

namespace retro {

using json = nlohmann::json;

// ================================================================================================
// Parameters
// ================================================================================================

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

std::string fmt_num(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

}  // namespace

SynthParams SynthParams::preset(const std::string& name) {
    SynthParams p;
    p.preset_name = name;
    if (name == "llama3-8b") {
        p.num_q_heads = 32;
        p.num_kv_heads = 8;
        p.head_dim = 128;
        p.rope_theta = 500000.0;
    } else if (name == "smollm2") {
        p.num_q_heads = 9;
        p.num_kv_heads = 3;
        p.head_dim = 64;
        p.rope_theta = 100000.0;
        // Calibrated against a real SmolLM2-135M-Instruct trace (8K Moby-Dick NIAH prompt, 30 layers;
        // docs/traces.md): sinks won by queries pointing away from a large low-band key mean (sink keys
        // lack it), tokens carrying more or less of that mean (heavy hitters), queries that are only ~2.5x
        // out of distribution and turn more between steps, no sinks in the lower 40% of the layers, a
        // diffuse first layer, more local mass with a long recency tail (mass at 64-512 tokens back).
        p.sink_mode = "mean";
        p.key_mean = 1.5;
        p.key_mean_low_gain = 2.2;
        p.key_mean_jitter = 0.12;
        p.query_offset = 0.0;
        p.key_noise = 0.6;
        p.query_noise_gain = 1.3;
        p.focus_ar = 0.97;
        p.local_mass_min = 0.15;
        p.local_mass_max = 0.9;
        p.recency_span_factor = 64.0;
        p.sink_mass_min = 0.2;
        p.sink_mass_max = 0.95;
        p.sink_onset = 0.4;
        p.sharp_min = 0.8;
        p.sharp_max = 3.0;
        p.diffuse_layers = 1;
        p.peaked_fraction = 0.8;
    } else {
        throw ParamError("unknown synth preset '" + name + "' (expected llama3-8b or smollm2)");
    }
    return p;
}

std::vector<std::string> SynthParams::preset_names() { return {"llama3-8b", "smollm2"}; }

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
    std::vector<std::string> known;
    for_each_field(p, [&](const char* name, auto&) { known.emplace_back(name); });
    for (const auto& [key, val] : j.items()) {
        if (key == "preset") continue;
        bool found = false;
        for_each_field(p, [&](const char* name, auto& field) {
            if (key != name) return;
            found = true;
            using T = std::decay_t<decltype(field)>;
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
        });
        if (!found) {
            std::string list;
            for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
            throw ConfigError("synth params: unknown key \"" + key + "\" (known keys: " + list + ")");
        }
    }
    return p;
}

namespace {

constexpr double kCarrierMaxFreq = 0.125;  ///< highest RoPE frequency (rad/token) of the recency carrier

/// Frequency bands of the RoPE pairs (pair j = dims j and j + head_dim/2, frequency theta^(-2j/d)).
struct Bands {
    int P = 0;                   ///< pairs
    int c_begin = 0, c_end = 0;  ///< recency carrier: pairs with 1/(recency_span_factor local_window) <= freq <= kCarrierMaxFreq
    int s_begin = 0, s_end = 0;  ///< semantic band: pairs with freq < 1/local_window, below the Z band
    int z_begin = 0;             ///< sink / query-offset band: the lowest-frequency pairs [z_begin, P)
    int n_begin = 0;             ///< needle pairs: [n_begin, s_end) (the lowest-frequency semantic pairs)
    int l_begin = 0;             ///< low band: [l_begin, P), pairs turning <= 1 rad over the trace (and Z)
    std::vector<double> freq;    ///< [P]
    int s_pairs() const { return s_end - s_begin; }
};

Bands make_bands(const SynthParams& p) {
    Bands b;
    b.P = p.head_dim / 2;
    b.freq.resize((size_t)b.P);
    for (int j = 0; j < b.P; ++j) b.freq[(size_t)j] = std::pow(p.rope_theta, -2.0 * j / p.head_dim);
    const int nz = std::max(2, b.P / 16);
    b.z_begin = b.P - nz;
    b.s_end = b.z_begin;
    int s0 = 0;
    while (s0 < b.P && b.freq[(size_t)s0] >= 1.0 / p.local_window) ++s0;
    b.s_begin = std::min(s0, b.P / 3);
    // Carrier of the recency component: frequencies in [1/(f W), kCarrierMaxFreq], f = recency_span_factor (lower
    // frequencies give the kernel a longer tail; kCarrierMaxFreq is slow enough that its far-field
    // RoPE ripple changes little from one decode step to the next), at least 4 pairs, above the Z band.
    int c0 = 0, c1 = 0;
    while (c0 < b.P && b.freq[(size_t)c0] > kCarrierMaxFreq) ++c0;
    c1 = c0;
    while (c1 < b.z_begin && b.freq[(size_t)c1] >= 1.0 / (p.recency_span_factor * p.local_window)) ++c1;
    while (c1 - c0 < 4 && c0 > 0) --c0;
    while (c1 - c0 < 4 && c1 < b.z_begin) ++c1;
    b.c_begin = c0;
    b.c_end = c1;
    // Needle pairs: semantic pairs that rotate by at most 1 radian over the whole trace (coherent at any
    // distance); at least a quarter of the semantic band (and 2 pairs).
    const int min_needle = std::max(2, b.s_pairs() / 4);
    int nb = b.s_end;
    while (nb > b.s_begin && b.freq[(size_t)(nb - 1)] * p.n_tokens() <= 1.0) --nb;
    b.n_begin = std::min(nb, b.s_end - min_needle);
    b.n_begin = std::max(b.n_begin, b.s_begin);
    int lb = b.P;
    while (lb > 0 && b.freq[(size_t)(lb - 1)] * p.n_tokens() <= 1.0) --lb;
    b.l_begin = std::min(lb, b.z_begin);
    return b;
}

}  // namespace

void SynthParams::validate() const {
    const auto fail = [](const std::string& name, const std::string& val, const std::string& range) {
        throw ParamError("synth parameter " + name + " = " + val + " is out of range: expected " + range);
    };
    const auto irange = [&](const char* name, long long v, long long lo, long long hi) {
        if (v < lo || v > hi)
            fail(name, std::to_string(v), std::to_string(lo) + " .. " + std::to_string(hi));
    };
    const auto rrange = [&](const char* name, double v, double lo, double hi, bool lo_open = false) {
        if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo))
            fail(name, fmt_num(v), (lo_open ? "(" : "[") + fmt_num(lo) + ", " + fmt_num(hi) + "]");
    };
    const auto ordered = [&](const char* lo_name, double lo, const char* hi_name, double hi) {
        if (lo > hi)
            throw ParamError(std::string("synth parameters ") + lo_name + " = " + fmt_num(lo) + " and " + hi_name +
                             " = " + fmt_num(hi) + ": expected " + lo_name + " <= " + hi_name);
    };
    bool known_preset = false;
    for (const auto& n : preset_names()) known_preset |= n == preset_name;
    if (!known_preset) fail("preset", "'" + preset_name + "'", "llama3-8b or smollm2");
    irange("num_layers", num_layers, 1, 1024);
    irange("num_q_heads", num_q_heads, 1, 1024);
    irange("num_kv_heads", num_kv_heads, 1, 1024);
    if (num_q_heads % num_kv_heads != 0)
        throw ParamError("synth parameters num_q_heads = " + std::to_string(num_q_heads) + " and num_kv_heads = " +
                         std::to_string(num_kv_heads) + ": num_kv_heads must divide num_q_heads");
    irange("head_dim", head_dim, 16, 512);
    if (head_dim % 2 != 0) fail("head_dim", std::to_string(head_dim), "an even number in 16 .. 512");
    rrange("rope_theta", rope_theta, 2.0, 1e12);
    irange("prompt_len", prompt_len, 16, 1 << 23);
    irange("decode_steps", decode_steps, 1, 1 << 20);
    irange("prefill_queries", prefill_queries, 0, prompt_len);
    if (dtype != "float16" && dtype != "bfloat16" && dtype != "float32")
        fail("dtype", "'" + dtype + "'", "float16, bfloat16 or float32");
    irange("sink_tokens", sink_tokens, 0, std::max(0, prompt_len / 4));
    if (sink_mode != "offset" && sink_mode != "mean") fail("sink_mode", "'" + sink_mode + "'", "offset or mean");
    rrange("sink_mass_min", sink_mass_min, 0.0, 0.95);
    rrange("sink_mass_max", sink_mass_max, 0.0, 0.95);
    ordered("sink_mass_min", sink_mass_min, "sink_mass_max", sink_mass_max);
    irange("local_window", local_window, 2, std::max(2, prompt_len / 2));
    rrange("local_mass_min", local_mass_min, 0.0, 0.95);
    rrange("local_mass_max", local_mass_max, 0.0, 0.95);
    ordered("local_mass_min", local_mass_min, "local_mass_max", local_mass_max);
    rrange("recency_span_factor", recency_span_factor, 1.0, 1e6);
    rrange("sharp_min", sharp_min, 0.0, 20.0, true);
    rrange("sharp_max", sharp_max, 0.0, 20.0, true);
    ordered("sharp_min", sharp_min, "sharp_max", sharp_max);
    rrange("peaked_fraction", peaked_fraction, 0.0, 1.0);
    irange("diffuse_layers", diffuse_layers, 0, num_layers);
    rrange("diffuse_sharpness", diffuse_sharpness, 0.0, 20.0, true);
    rrange("sink_onset", sink_onset, 0.0, 1.0);
    rrange("topic_run", topic_run, 1.0, 1e9);
    rrange("topic_new_prob", topic_new_prob, 0.0, 1.0);
    rrange("topic_share", topic_share, 0.0, 1.0);
    irange("vocab_size", vocab_size, 1, 1 << 24);
    rrange("word_share", word_share, 0.0, 1.0);
    if (topic_share + word_share > 1.0 + 1e-12)
        throw ParamError("synth parameters topic_share = " + fmt_num(topic_share) + " and word_share = " +
                         fmt_num(word_share) + ": expected topic_share + word_share <= 1");
    rrange("key_salience_sigma", key_salience_sigma, 0.0, 2.0);
    rrange("focus_ar", focus_ar, 0.0, 1.0);
    rrange("gqa_shared", gqa_shared, 0.0, 1.0);
    rrange("query_offset", query_offset, 0.0, 1e4);
    irange("num_needles", num_needles, 0, 1 << 20);
    rrange("needle_rate", needle_rate, 0.0, 1.0);
    rrange("needle_persist", needle_persist, 0.0, 1.0);
    rrange("needle_head_fraction", needle_head_fraction, 0.0, 1.0);
    rrange("needle_z", needle_z, 0.0, 50.0);
    rrange("key_mean", key_mean, 0.0, 100.0);
    rrange("key_mean_low_gain", key_mean_low_gain, 0.0, 100.0);
    rrange("key_mean_jitter", key_mean_jitter, 0.0, 10.0);
    rrange("key_noise", key_noise, 0.0, 100.0);
    rrange("query_noise_gain", query_noise_gain, 0.0, 100.0);
    rrange("value_mean", value_mean, 0.0, 100.0);
    rrange("value_topic", value_topic, 0.0, 100.0);
    rrange("value_noise", value_noise, 0.0, 100.0);
    rrange("sink_value_scale", sink_value_scale, 0.0, 100.0);
    rrange("needle_value", needle_value, 0.0, 100.0);
    irange("needle_span", needle_span, 1, 4096);
    // Room for the needles: positions [sink_tokens, prompt_len - local_window); spans of more than one
    // token may fill at most half of it (they are placed without overlap by rejection).
    const int room = prompt_len - local_window - sink_tokens;
    const int max_needles = needle_span == 1 ? std::max(0, room) : std::max(0, room / (2 * needle_span));
    if (num_needles > max_needles)
        throw ParamError("synth parameter num_needles = " + std::to_string(num_needles) +
                         " is out of range: expected 0 .. " + std::to_string(max_needles) +
                         " (needles of needle_span = " + std::to_string(needle_span) +
                         " tokens sit in [sink_tokens, prompt_len - local_window))");
    const Bands b = make_bands(*this);
    if (b.s_pairs() < 4)
        throw ParamError("synth parameters head_dim = " + std::to_string(head_dim) + ", local_window = " +
                         std::to_string(local_window) + ": the semantic RoPE band has " +
                         std::to_string(b.s_pairs()) + " pairs, expected >= 4 (increase head_dim)");
}

// ================================================================================================
// Random streams
// ================================================================================================

namespace {

inline uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

enum Tag : uint64_t {
    kText = 1, kNeedlePos, kHeadParam, kKeyMean, kSinkDir, kTopicKey, kNeedleKey, kKeyTok, kValMean,
    kTopicVal, kNeedleVal, kValTok, kFocusGroup, kFocusHead, kNeedleSched, kQueryOffset, kQueryNoise,
    kWord, kWordKey, kMeanJitter,
};

/// Independent stream keyed by (seed, tag, a, b, c): splitmix64 + Marsaglia polar normals.
struct Rng {
    uint64_t s;
    double spare = 0;
    bool has_spare = false;
    Rng(uint64_t seed, uint64_t tag, uint64_t a = 0, uint64_t b = 0, uint64_t c = 0) {
        uint64_t h = mix64(seed ^ 0x5851f42d4c957f2dull);
        h = mix64(h ^ tag);
        h = mix64(h ^ (a + 0x632be59bd9b4e019ull));
        h = mix64(h ^ (b + 0x8cb92ba72f3d8dd7ull));
        s = mix64(h ^ (c + 0x2545f4914f6cdd1dull));
    }
    uint64_t next() {
        s += 0x9e3779b97f4a7c15ull;
        uint64_t z = s;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform() { return (double)(next() >> 11) * 0x1.0p-53; }  ///< [0, 1)
    double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
    int below(int n) { return (int)(uniform() * n); }
    double normal() {
        if (has_spare) {
            has_spare = false;
            return spare;
        }
        double u, v, r;
        do {
            u = 2.0 * uniform() - 1.0;
            v = 2.0 * uniform() - 1.0;
            r = u * u + v * v;
        } while (r >= 1.0 || r == 0.0);
        const double f = std::sqrt(-2.0 * std::log(r) / r);
        spare = v * f;
        has_spare = true;
        return u * f;
    }
};

/// cos/sin of position * freq[j] for positions [0, n): [n, P] each.
struct RopeTable {
    int P = 0;
    std::vector<float> c, s;
    RopeTable(const Bands& b, int n) : P(b.P), c((size_t)n * b.P), s((size_t)n * b.P) {
        for (int i = 0; i < n; ++i)
            for (int j = 0; j < P; ++j) {
                const double a = (double)i * b.freq[(size_t)j];
                c[(size_t)i * P + j] = (float)std::cos(a);
                s[(size_t)i * P + j] = (float)std::sin(a);
            }
    }
    /// Rotates x [2P] (half_split layout) to position pos, in place.
    void rotate(float* x, int pos) const {
        const float* cc = c.data() + (size_t)pos * P;
        const float* ss = s.data() + (size_t)pos * P;
        for (int j = 0; j < P; ++j) {
            const float a = x[j], b = x[j + P];
            x[j] = a * cc[j] - b * ss[j];
            x[j + P] = b * cc[j] + a * ss[j];
        }
    }
};

/// Fills the dims of pairs [p0, p1) of x (both halves) with normal(0, sd) draws.
void fill_pairs(Rng& r, float* x, int P, int p0, int p1, double sd) {
    for (int j = p0; j < p1; ++j) {
        x[j] = (float)(sd * r.normal());
        x[j + P] = (float)(sd * r.normal());
    }
}

constexpr double kNeedleKeySd = 3.0;  ///< per-dim std of a needle's key direction (needle pairs)
constexpr double kSinkFirst = 1.0, kSinkOther = 0.8;  ///< relative sink key offsets (token 0 strongest)
constexpr int kCalibSteps = 4;  ///< decode steps (spread evenly) the per-head calibration averages over
constexpr int kCalibTokens = 4096;  ///< far tokens sampled per calibration step
constexpr double kMaxLogit = 40.0;  ///< cap on the fitted recency peak and sink logits

/// Draws of one query head (stream kHeadParam(layer, q_head)).
SynthHeadInfo draw_head(const SynthParams& p, int layer, int qh) {
    Rng r(p.seed, kHeadParam, (uint64_t)layer, (uint64_t)qh);
    SynthHeadInfo h;
    h.peaked = r.uniform() < p.peaked_fraction;
    const double u = h.peaked ? 0.6 + 0.4 * r.uniform() : 0.4 * r.uniform();
    h.sharpness = p.sharp_min + (p.sharp_max - p.sharp_min) * u;
    h.sink_target = r.uniform(p.sink_mass_min, p.sink_mass_max);
    // The layer profile overrides the draws (taken all the same, so the other draws do not move).
    if (layer < p.diffuse_layers) {
        const double v = h.peaked ? (u - 0.6) / 0.4 : u / 0.4;  // U(0, 1) either way
        h.peaked = false;
        h.sharpness = p.diffuse_sharpness * (0.5 + 0.5 * v);
    }
    if (layer < p.sink_onset * p.num_layers) h.sink_target = 0.0;
    h.local_target = r.uniform(p.local_mass_min, p.local_mass_max);
    const double a = r.uniform();
    const double b = r.uniform();
    h.needle_affinity = a < p.needle_head_fraction ? 0.5 + 0.5 * b : 0.0;
    return h;
}

/// Finds c in [0, cap] with f(c) ~= target for f (nearly) increasing in c: doubles hi from 1 until
/// f(hi) >= target, then bisects. Returns 0 if f(0) >= target; if the target is out of reach below
/// `cap`, returns the point of the doubling grid (capped) where f was largest.
double solve_increasing(const std::function<double(double)>& f, double target, double cap) {
    if (f(0.0) >= target) return 0.0;
    double lo = 0.0, hi = std::min(1.0, cap);
    double best_c = 0.0, best_f = f(0.0);
    for (;;) {
        const double v = f(hi);
        if (v >= target) break;
        if (v > best_f) {
            best_f = v;
            best_c = hi;
        }
        if (hi >= cap) return best_c;  // unreachable: best effort
        lo = hi;
        hi = std::min(2.0 * hi, cap);
    }
    for (int it = 0; it < 40; ++it) {
        const double mid = 0.5 * (lo + hi);
        if (f(mid) < target) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

}  // namespace

// ================================================================================================
// Text: topics and needles
// ================================================================================================

SynthText synth_text(const SynthParams& p) {
    SynthText t;
    const int n = p.n_tokens();
    t.topic.resize((size_t)n);
    Rng r(p.seed, kText);
    int cur = 0;
    t.num_topics = 1;
    const double p_switch = 1.0 / p.topic_run;
    for (int i = 0; i < n; ++i) {
        if (i > 0 && r.uniform() < p_switch) {
            if (t.num_topics == 1 || r.uniform() < p.topic_new_prob) {
                cur = t.num_topics++;
            } else {
                int c = r.below(t.num_topics - 1);  // a previously seen topic other than the current one
                if (c >= cur) ++c;
                cur = c;
            }
        }
        t.topic[(size_t)i] = cur;
    }
    // Word types: uniform over the vocabulary (repeated words recur all over the context).
    t.word.resize((size_t)n);
    Rng rw(p.seed, kWord);
    for (int i = 0; i < n; ++i) t.word[(size_t)i] = rw.below(p.vocab_size);
    // Needles: non-overlapping spans [x, x + needle_span) in [sink_tokens, prompt_len - local_window).
    Rng rn(p.seed, kNeedlePos);
    const int span = p.needle_span;
    const int lo = p.sink_tokens, hi = p.prompt_len - p.local_window - (span - 1);
    std::vector<int> pos;
    while ((int)pos.size() < p.num_needles && hi > lo) {
        const int x = lo + rn.below(hi - lo);
        if (std::none_of(pos.begin(), pos.end(), [&](int y) { return std::abs(x - y) < span; })) pos.push_back(x);
    }
    std::sort(pos.begin(), pos.end());
    t.needles = pos;
    return t;
}

// ================================================================================================
// One layer
// ================================================================================================

SynthLayer synthesize_layer(const SynthParams& p, int layer) {
    p.validate();
    if (layer < 0 || layer >= p.num_layers)
        throw ParamError("synthesize_layer: layer " + std::to_string(layer) + " is out of range 0 .. " +
                         std::to_string(p.num_layers - 1));
    const int d = p.head_dim, n = p.n_tokens(), H = p.num_q_heads, G = p.num_kv_heads, grp = H / G;
    const int npf = p.prefill_queries, steps = p.decode_steps;
    const Bands B = make_bands(p);
    const int P = B.P;
    const RopeTable rope(B, n);
    const SynthText text = synth_text(p);
    const float inv_sqrt_d = 1.0f / std::sqrt((float)d);
    const double A_sink = std::sqrt((double)d);  // sink key offset norm (key units), sink_mode "offset"
    const bool sink_by_mean = p.sink_mode == "mean";

    SynthLayer L;
    L.layer = layer;
    L.keys.assign((size_t)G * n * d, 0.0f);
    L.values.assign((size_t)G * n * d, 0.0f);
    L.queries.assign((size_t)H * steps * d, 0.0f);
    L.prefill_queries.assign((size_t)H * npf * d, 0.0f);
    L.heads.resize((size_t)H);
    for (int h = 0; h < H; ++h) L.heads[(size_t)h] = draw_head(p, layer, h);

    // needle index by position (-1 = none)
    std::vector<int> needle_at((size_t)n, -1);
    for (size_t k = 0; k < text.needles.size(); ++k)
        for (int j = 0; j < p.needle_span; ++j) needle_at[(size_t)(text.needles[k] + j)] = (int)k;
    const int T = text.num_topics, NN = (int)text.needles.size();

    // ---- per KV head constants -------------------------------------------------------------------------
    struct KvConst {
        std::vector<float> mu_k, e_s, mu_v;  // [d]
        std::vector<float> topic_k;          // [T, d] (semantic pairs only)
        std::vector<float> word_k;           // [V, d] (semantic pairs only)
        std::vector<float> topic_v;          // [T, d]
        std::vector<float> needle_k, needle_v;  // [NN, d]
    };
    std::vector<KvConst> kc((size_t)G);
    for (int g = 0; g < G; ++g) {
        KvConst& c = kc[(size_t)g];
        c.mu_k.assign((size_t)d, 0.0f);
        {
            Rng r(p.seed, kKeyMean, (uint64_t)layer, (uint64_t)g);
            fill_pairs(r, c.mu_k.data(), P, 0, P, p.key_mean);
            for (int j = B.l_begin; j < P; ++j) {
                c.mu_k[(size_t)j] *= (float)p.key_mean_low_gain;
                c.mu_k[(size_t)(j + P)] *= (float)p.key_mean_low_gain;
            }
            // Carrier pairs: equal modulus (key_mean * sqrt 2), random phase, so the recency kernel's
            // far-field ripple is as small as the number of pairs allows.
            for (int j = B.c_begin; j < B.c_end; ++j) {
                const double a = c.mu_k[(size_t)j], bb = c.mu_k[(size_t)(j + P)];
                const double m = std::sqrt(a * a + bb * bb);
                const double target = p.key_mean * std::sqrt(2.0);
                if (m > 0) {
                    c.mu_k[(size_t)j] = (float)(a * target / m);
                    c.mu_k[(size_t)(j + P)] = (float)(bb * target / m);
                }
            }
        }
        c.e_s.assign((size_t)d, 0.0f);
        {
            if (sink_by_mean) {  // queries win the sinks by pointing away from the low-band key mean
                for (int j = B.l_begin; j < P; ++j) {
                    c.e_s[(size_t)j] = -c.mu_k[(size_t)j];
                    c.e_s[(size_t)(j + P)] = -c.mu_k[(size_t)(j + P)];
                }
            } else {  // a random direction in Z
                Rng r(p.seed, kSinkDir, (uint64_t)layer, (uint64_t)g);
                fill_pairs(r, c.e_s.data(), P, B.z_begin, P, 1.0);
            }
            double nrm = 0;
            for (float v : c.e_s) nrm += (double)v * v;
            nrm = std::sqrt(nrm);
            for (float& v : c.e_s) v = (float)(v / nrm);
        }
        c.mu_v.assign((size_t)d, 0.0f);
        {
            Rng r(p.seed, kValMean, (uint64_t)layer, (uint64_t)g);
            for (int i = 0; i < d; ++i) c.mu_v[(size_t)i] = (float)(p.value_mean * r.normal());
        }
        c.topic_k.assign((size_t)T * d, 0.0f);
        c.topic_v.assign((size_t)T * d, 0.0f);
        for (int t = 0; t < T; ++t) {
            Rng rk(p.seed, kTopicKey, (uint64_t)layer, (uint64_t)g, (uint64_t)t);
            fill_pairs(rk, c.topic_k.data() + (size_t)t * d, P, B.s_begin, B.s_end, 1.0);
            Rng rv(p.seed, kTopicVal, (uint64_t)layer, (uint64_t)g, (uint64_t)t);
            for (int i = 0; i < d; ++i) c.topic_v[(size_t)t * d + i] = (float)(p.value_topic * rv.normal());
        }
        c.word_k.assign((size_t)p.vocab_size * d, 0.0f);
        for (int w = 0; w < p.vocab_size; ++w) {
            Rng rk(p.seed, kWordKey, (uint64_t)layer, (uint64_t)g, (uint64_t)w);
            fill_pairs(rk, c.word_k.data() + (size_t)w * d, P, B.s_begin, B.s_end, 1.0);
        }
        c.needle_k.assign((size_t)NN * d, 0.0f);
        c.needle_v.assign((size_t)NN * d, 0.0f);
        for (int k = 0; k < NN; ++k) {
            Rng rk(p.seed, kNeedleKey, (uint64_t)layer, (uint64_t)g, (uint64_t)k);
            fill_pairs(rk, c.needle_k.data() + (size_t)k * d, P, B.n_begin, B.s_end, kNeedleKeySd);
            Rng rv(p.seed, kNeedleVal, (uint64_t)layer, (uint64_t)g, (uint64_t)k);
            for (int i = 0; i < d; ++i) c.needle_v[(size_t)k * d + i] = (float)(p.needle_value * rv.normal());
        }
    }

    // ---- keys and values --------------------------------------------------------------------------------
    const double ts = std::sqrt(p.topic_share), ws = std::sqrt(p.word_share);
    const double es = std::sqrt(std::max(0.0, 1.0 - p.topic_share - p.word_share));
    const double sal = p.key_salience_sigma;
    const long long total = (long long)G * n;
#pragma omp parallel for schedule(static, 256)
    for (long long gi = 0; gi < total; ++gi) {
        const int g = (int)(gi / n), i = (int)(gi % n);
        const KvConst& c = kc[(size_t)g];
        float* k = L.keys.data() + ((size_t)g * n + i) * d;
        float* v = L.values.data() + ((size_t)g * n + i) * d;
        Rng r(p.seed, kKeyTok, (uint64_t)layer, (uint64_t)g, (uint64_t)i);
        const int z = text.topic[(size_t)i];
        const float* tk = c.topic_k.data() + (size_t)z * d;
        const float* wk = c.word_k.data() + (size_t)text.word[(size_t)i] * d;
        // Salience (lognormal, mean 1); sink tokens carry no semantic content (a stable sink logit).
        const double ri = i < p.sink_tokens ? 0.0 : std::exp(sal * r.normal() - 0.5 * sal * sal);
        for (int j = 0; j < d; ++j) k[j] = c.mu_k[(size_t)j] + (float)(p.key_noise * r.normal());
        if (p.key_mean_jitter > 0 && i >= p.sink_tokens) {
            // Tokens carry more or less of the low-band mean: with sink_mode "mean" the ones with less
            // are attended by every query that points away from the mean (heavy hitters).
            Rng rj(p.seed, kMeanJitter, (uint64_t)layer, (uint64_t)g, (uint64_t)i);
            const float e = (float)(p.key_mean_jitter * rj.normal());
            for (int j = B.l_begin; j < P; ++j) {
                k[j] += e * c.mu_k[(size_t)j];
                k[j + P] += e * c.mu_k[(size_t)(j + P)];
            }
        }
        for (int j = B.s_begin; j < B.s_end; ++j) {
            k[j] += (float)(ri * (ts * tk[j] + ws * wk[j] + es * r.normal()));
            k[j + P] += (float)(ri * (ts * tk[j + P] + ws * wk[j + P] + es * r.normal()));
        }
        const int nd = needle_at[(size_t)i];
        if (nd >= 0) {
            const float* nk = c.needle_k.data() + (size_t)nd * d;
            for (int j = 0; j < d; ++j) k[j] += nk[j];
        }
        if (i < p.sink_tokens) {
            // Sinks: no local carrier either (no RoPE ripple on their logit), plus the sink offset.
            for (int j = B.c_begin; j < B.c_end; ++j) {
                k[j] -= c.mu_k[(size_t)j];
                k[j + P] -= c.mu_k[(size_t)(j + P)];
            }
            if (sink_by_mean) {  // the sink lacks (most of) the low-band key mean
                const double a = i == 0 ? kSinkFirst : kSinkOther;
                for (int j = B.l_begin; j < P; ++j) {
                    k[j] -= (float)(a * c.mu_k[(size_t)j]);
                    k[j + P] -= (float)(a * c.mu_k[(size_t)(j + P)]);
                }
            } else {
                const double a = A_sink * (i == 0 ? kSinkFirst : kSinkOther);
                for (int j = 0; j < d; ++j) k[j] += (float)(a * c.e_s[(size_t)j]);
            }
        }
        rope.rotate(k, i);

        Rng rv(p.seed, kValTok, (uint64_t)layer, (uint64_t)g, (uint64_t)i);
        const float* tv = (nd >= 0 ? c.needle_v.data() + (size_t)nd * d : c.topic_v.data() + (size_t)z * d);
        const float vs = i < p.sink_tokens ? (float)p.sink_value_scale : 1.0f;
        for (int j = 0; j < d; ++j)
            v[j] = vs * (c.mu_v[(size_t)j] + tv[j] + (float)(p.value_noise * rv.normal()));
    }

    // ---- queries ----------------------------------------------------------------------------------------
    // Positions of the query process: [q0, prompt_len + steps): prefill queries then decode queries.
    const int q0 = p.prompt_len - npf, nq = npf + steps;
    const int sd = 2 * B.s_pairs();  // semantic dims
    const double rho = p.focus_ar, innov = std::sqrt(std::max(0.0, 1.0 - rho * rho));
    // AR(1) focus of one stream over the nq positions: [nq, sd].
    const auto ar_process = [&](Rng& r) {
        std::vector<float> x((size_t)nq * sd);
        for (int k = 0; k < sd; ++k) x[(size_t)k] = (float)r.normal();
        for (int t = 1; t < nq; ++t)
            for (int k = 0; k < sd; ++k)
                x[(size_t)t * sd + k] = (float)(rho * x[(size_t)(t - 1) * sd + k] + innov * r.normal());
        return x;
    };
    std::vector<std::vector<float>> focus_g((size_t)G);
    std::vector<std::vector<int>> target_g((size_t)G);  // needle targeted at each position (-1 none)
    for (int g = 0; g < G; ++g) {
        Rng r(p.seed, kFocusGroup, (uint64_t)layer, (uint64_t)g);
        focus_g[(size_t)g] = ar_process(r);
        Rng rs(p.seed, kNeedleSched, (uint64_t)layer, (uint64_t)g);
        std::vector<int>& tg = target_g[(size_t)g];
        tg.assign((size_t)nq, -1);
        int cur = -1;
        for (int t = 0; t < nq; ++t) {
            const double u = rs.uniform();
            const int pick = NN > 0 ? rs.below(NN) : -1;
            if (cur >= 0) {
                if (u >= p.needle_persist) cur = -1;
            } else if (NN > 0 && u < p.needle_rate) {
                cur = pick;
            }
            // a needle is only targeted once it exists (always true here: needles sit in the prompt)
            tg[(size_t)t] = cur;
        }
    }

    const double sg = std::sqrt(p.gqa_shared), sh = std::sqrt(1.0 - p.gqa_shared);

#pragma omp parallel for schedule(dynamic, 1)
    for (int h = 0; h < H; ++h) {
        const int g = h / grp;
        const KvConst& c = kc[(size_t)g];
        SynthHeadInfo& info = L.heads[(size_t)h];
        const float* K = L.keys.data() + (size_t)g * n * d;
        Rng rf(p.seed, kFocusHead, (uint64_t)layer, (uint64_t)h);
        const std::vector<float> own = ar_process(rf);
        const std::vector<float>& shared = focus_g[(size_t)g];

        // Components (pre-RoPE, [d]): semantic focus at process index t (unit beta), local carrier (unit
        // lambda), sink direction (unit b), fixed offset.
        const auto semantic = [&](int t, float* x) {
            std::fill(x, x + d, 0.0f);
            const float* a = shared.data() + (size_t)t * sd;
            const float* b = own.data() + (size_t)t * sd;
            for (int k = 0; k < B.s_pairs(); ++k) {
                const int j = B.s_begin + k;
                x[j] = (float)(sg * a[k] + sh * b[k]);
                x[j + P] = (float)(sg * a[B.s_pairs() + k] + sh * b[B.s_pairs() + k]);
            }
        };
        std::vector<float> local((size_t)d, 0.0f);
        for (int j = B.c_begin; j < B.c_end; ++j) {
            local[(size_t)j] = c.mu_k[(size_t)j];
            local[(size_t)(j + P)] = c.mu_k[(size_t)(j + P)];
        }
        std::vector<float> offset((size_t)d, 0.0f);
        {
            Rng r(p.seed, kQueryOffset, (uint64_t)layer, (uint64_t)h);
            fill_pairs(r, offset.data(), P, B.z_begin, P, 1.0);
            double dot = 0, nrm = 0;
            for (int j = 0; j < d; ++j) dot += (double)offset[(size_t)j] * c.e_s[(size_t)j];
            for (int j = 0; j < d; ++j) offset[(size_t)j] -= (float)(dot * c.e_s[(size_t)j]);
            for (float v : offset) nrm += (double)v * v;
            nrm = std::sqrt(nrm);
            for (float& v : offset) v = nrm > 0 ? (float)(v * p.query_offset / nrm) : 0.0f;
        }

        // Fixed part of the query at process index t (pre-RoPE): offset + noise + needle term.
        double needle_energy = 0;
        for (int j = B.n_begin; j < B.s_end; ++j) needle_energy += 2.0 * kNeedleKeySd * kNeedleKeySd;
        info.needle_coef =
            needle_energy > 0 ? p.needle_z * info.sharpness * std::sqrt((double)d) / needle_energy : 0.0;
        const auto fixed_part = [&](int t, float* y) {
            Rng rn(p.seed, kQueryNoise, (uint64_t)layer, (uint64_t)h, (uint64_t)t);
            const double qn = p.key_noise * p.query_noise_gain;
            for (int j = 0; j < d; ++j) y[j] = offset[(size_t)j] + (float)(qn * rn.normal());
            const int nt = target_g[(size_t)g][(size_t)t];
            if (nt >= 0 && info.needle_affinity > 0) {
                const float* nk = c.needle_k.data() + (size_t)nt * d;
                const double a = info.needle_affinity * info.needle_coef;
                for (int j = 0; j < d; ++j) y[j] += (float)(a * nk[j]);
            }
        };

        // ---- calibration on reference decode steps ----
        // Component scores (semantic with unit beta, recency carrier with unit lambda, sink direction with
        // unit b, fixed part) of the queries of a few decode steps spread over the trace, on a sample of
        // the visible tokens: all sinks, all of the last local_window tokens, and every stride-th
        // token in between (weighted by the stride) so the calibration costs O(kCalibTokens).
        std::vector<int> refs;
        for (int k = 0; k < kCalibSteps; ++k) {
            const int t = (int)std::lround((double)k * (steps - 1) / std::max(1, kCalibSteps - 1));
            if (refs.empty() || refs.back() != t) refs.push_back(t);
        }
        const int s0 = std::min(p.sink_tokens, p.prompt_len);
        struct Ref {
            std::vector<int32_t> ids;  // sampled tokens: sinks [0, ns), far [ns, nf), window [nf, m)
            int ns = 0, nf = 0;
            float logw_far = 0;        // log(stride) of the far samples
            std::vector<float> sem, loc, snk, fix, work;
        };
        std::vector<Ref> R(refs.size());
        std::vector<float> x((size_t)d), tmp((size_t)d);
        for (size_t r = 0; r < refs.size(); ++r) {
            const int t = npf + refs[r], pos = p.prompt_len + refs[r], n = pos + 1;
            Ref& f = R[r];
            const int w0 = std::max(s0, n - p.local_window);
            const int stride = std::max(1, (w0 - s0) / kCalibTokens);
            for (int i = 0; i < s0; ++i) f.ids.push_back(i);
            f.ns = (int)f.ids.size();
            for (int i = s0; i < w0; i += stride) f.ids.push_back(i);
            f.nf = (int)f.ids.size();
            for (int i = w0; i < n; ++i) f.ids.push_back(i);
            f.logw_far = std::log((float)stride);
            const auto scores_of = [&](const float* x_pre, std::vector<float>& out) {
                std::copy(x_pre, x_pre + d, tmp.begin());
                rope.rotate(tmp.data(), pos);
                out.resize(f.ids.size());
                attention_scores_ids(tmp.data(), K, f.ids, d, inv_sqrt_d, out.data());
            };
            semantic(t, x.data());
            scores_of(x.data(), f.sem);
            scores_of(local.data(), f.loc);
            scores_of(c.e_s.data(), f.snk);
            fixed_part(t, x.data());
            scores_of(x.data(), f.fix);
            f.work.resize(f.ids.size());
        }
        // Log-sum-exp of f.work over sample range [i0, i1), far samples weighted by their stride.
        const auto lse = [](const Ref& f, int i0, int i1) {
            if (i1 <= i0) return -std::numeric_limits<double>::infinity();
            float m = -std::numeric_limits<float>::infinity();
            for (int i = i0; i < i1; ++i)
                m = std::max(m, f.work[(size_t)i] + (i >= f.ns && i < f.nf ? f.logw_far : 0.0f));
            double sum = 0;
            for (int i = i0; i < i1; ++i)
                sum += std::exp(f.work[(size_t)i] + (i >= f.ns && i < f.nf ? f.logw_far : 0.0f) - m);
            return (double)m + std::log(sum);
        };
        // beta and lambda, alternately (3 rounds): beta makes the std of the head's content scores
        // (semantic + recency ripple) over the far tokens [sink_tokens, n - local_window) equal to its
        // sharpness; lambda makes the mean share of the non-sink mass on the last local_window tokens
        // equal to local_target.
        double va = 0, vb = 0, cab = 0;  // mean over refs of var(sem), var(loc), cov(sem, loc) (far tokens)
        for (const Ref& f : R) {
            const int i0 = f.ns, i1 = std::max(f.ns + 1, f.nf), m = i1 - i0;
            double ma = 0, mb = 0;
            for (int i = i0; i < i1; ++i) {
                ma += f.sem[(size_t)i];
                mb += f.loc[(size_t)i];
            }
            ma /= m;
            mb /= m;
            double a2 = 0, b2 = 0, ab = 0;
            for (int i = i0; i < i1; ++i) {
                const double xa = f.sem[(size_t)i] - ma, yb = f.loc[(size_t)i] - mb;
                a2 += xa * xa;
                b2 += yb * yb;
                ab += xa * yb;
            }
            va += a2 / m / (double)R.size();
            vb += b2 / m / (double)R.size();
            cab += ab / m / (double)R.size();
        }
        const double sig2 = info.sharpness * info.sharpness;
        const auto local_share = [&](double lam) {
            double acc = 0;
            for (Ref& f : R) {
                for (size_t i = 0; i < f.work.size(); ++i)
                    f.work[i] = (float)(info.beta * f.sem[i] + lam * f.loc[i] + info.sink_coef * f.snk[i]) + f.fix[i];
                const int m = (int)f.work.size();
                acc += std::exp(lse(f, f.nf, m) - lse(f, f.ns, m));
            }
            return acc / (double)R.size();
        };
        // Caps keep the fitted coefficients physical when a target is out of reach (tiny heads): the
        // recency peak and the sink logit stay below kMaxLogit.
        double loc_max = 0, snk_max = 0;
        for (const Ref& f : R) {
            for (float v : f.loc) loc_max = std::max(loc_max, (double)v);
            // "mean" sinks score ~0 and the other tokens below: cap the sinks' lead over the far tokens
            double far = 0;
            if (sink_by_mean && f.nf > f.ns) {
                for (int i = f.ns; i < f.nf; ++i) far += f.snk[(size_t)i];
                far /= f.nf - f.ns;
            }
            for (int i = 0; i < f.ns; ++i) snk_max = std::max(snk_max, (double)f.snk[(size_t)i] - far);
        }
        const double lambda_cap = loc_max > 0 ? kMaxLogit / loc_max : 0.0;
        const double sink_cap = snk_max > 0 ? kMaxLogit / snk_max : 0.0;
        info.lambda = 0;
        // b: mean share of the mass on the sink tokens = sink_target.
        const auto sink_share = [&](double b) {
            double acc = 0;
            for (Ref& f : R) {
                for (size_t i = 0; i < f.work.size(); ++i)
                    f.work[i] = (float)(info.beta * f.sem[i] + info.lambda * f.loc[i] + b * f.snk[i]) + f.fix[i];
                const int m = (int)f.work.size();
                acc += std::exp(lse(f, 0, f.ns) - lse(f, 0, m));
            }
            return acc / (double)R.size();
        };
        // "offset" sinks barely touch the other tokens' scores: b is fitted once, after beta and lambda.
        // "mean" sinks move every token that carries less of the mean (heavy hitters), which takes mass
        // from the recency window: b is refitted in every round and lambda sees it.
        for (int round = 0; round < 3; ++round) {
            // beta^2 va + 2 beta lambda cab + lambda^2 vb = sig2; keep at least a quarter of the
            // semantic spread when the ripple alone would exceed it.
            const double lam = info.lambda;
            const double disc = lam * lam * cab * cab - va * (lam * lam * vb - sig2);
            double beta = va > 0 && disc > 0 ? (-lam * cab + std::sqrt(disc)) / va : 0.0;
            if (va > 0) beta = std::max(beta, 0.25 * info.sharpness / std::sqrt(va));
            info.beta = beta;
            info.lambda = solve_increasing(local_share, info.local_target, lambda_cap);
            if (sink_by_mean && s0 > 0) info.sink_coef = solve_increasing(sink_share, info.sink_target, sink_cap);
        }
        if (!sink_by_mean) info.sink_coef = s0 > 0 ? solve_increasing(sink_share, info.sink_target, sink_cap) : 0.0;

        // ---- assemble the queries of every position ----
        for (int t = 0; t < nq; ++t) {
            const int pos = q0 + t;
            semantic(t, x.data());
            fixed_part(t, tmp.data());
            for (int j = 0; j < d; ++j)
                x[(size_t)j] = (float)(info.beta * x[(size_t)j] + info.lambda * local[(size_t)j] +
                                       info.sink_coef * c.e_s[(size_t)j]) + tmp[(size_t)j];
            rope.rotate(x.data(), pos);
            float* dst = t < npf ? L.prefill_queries.data() + ((size_t)h * npf + t) * d
                                 : L.queries.data() + ((size_t)h * steps + (t - npf)) * d;
            std::copy(x.begin(), x.end(), dst);
        }
    }
    return L;
}

HeadSlice synth_head_slice(const SynthParams& p, const SynthLayer& L, int kv_head) {
    if (kv_head < 0 || kv_head >= p.num_kv_heads)
        throw ParamError("synth_head_slice: kv_head " + std::to_string(kv_head) + " is out of range 0 .. " +
                         std::to_string(p.num_kv_heads - 1));
    const int d = p.head_dim, n = p.n_tokens(), grp = p.num_q_heads / p.num_kv_heads;
    HeadSlice s;
    s.layer = L.layer;
    s.kv_head = kv_head;
    s.head_dim = d;
    s.prompt_len = p.prompt_len;
    s.num_steps = p.decode_steps;
    s.group = grp;
    s.first_q_head = kv_head * grp;
    const size_t kv = (size_t)n * d;
    s.keys.assign(L.keys.begin() + (ptrdiff_t)(kv_head * kv), L.keys.begin() + (ptrdiff_t)((kv_head + 1) * kv));
    s.values.assign(L.values.begin() + (ptrdiff_t)(kv_head * kv),
                    L.values.begin() + (ptrdiff_t)((kv_head + 1) * kv));
    const size_t qs = (size_t)p.decode_steps * d;
    s.queries.assign(L.queries.begin() + (ptrdiff_t)(s.first_q_head * qs),
                     L.queries.begin() + (ptrdiff_t)((s.first_q_head + grp) * qs));
    s.num_prefill = p.prefill_queries;
    s.prefill_first_position = p.prompt_len - p.prefill_queries;
    const size_t ps = (size_t)p.prefill_queries * d;
    s.prefill_queries.assign(L.prefill_queries.begin() + (ptrdiff_t)(s.first_q_head * ps),
                             L.prefill_queries.begin() + (ptrdiff_t)((s.first_q_head + grp) * ps));
    return s;
}

TraceInfo synth_trace_info(const SynthParams& p) {
    TraceInfo info;
    info.version = 1;
    info.model = "synthetic-" + p.preset_name;
    info.num_layers = p.num_layers;
    info.num_q_heads = p.num_q_heads;
    info.num_kv_heads = p.num_kv_heads;
    info.head_dim = p.head_dim;
    info.prompt_len = p.prompt_len;
    info.num_decode_steps = p.decode_steps;
    info.rope_applied = true;
    info.rope_layout = "half_split";
    info.rope_theta = p.rope_theta;
    info.source = "synthetic:retro-synth v1 " + p.to_json().dump();
    info.dtype = parse_dtype(p.dtype);
    for (int l = 0; l < p.num_layers; ++l) info.layers.push_back(l);
    info.num_prefill_queries = p.prefill_queries;
    info.prefill_first_position = p.prompt_len - p.prefill_queries;
    return info;
}

void synthesize(const SynthParams& p, const std::string& path) {
    p.validate();
    TraceInfo info = synth_trace_info(p);
    info.layers.clear();
    info.num_prefill_queries = 0;
    info.prefill_first_position = 0;
    TraceWriter w(path, info);
    for (int l = 0; l < p.num_layers; ++l) {
        SynthLayer L = synthesize_layer(p, l);
        w.write_layer(l, L.keys, L.values, L.queries, L.prefill_queries, p.prefill_queries,
                      p.prompt_len - p.prefill_queries);
    }
    w.finish();
}

}  // namespace retro
