#pragma once
// Synthetic attention traces ("retro-synth v1", docs/synth.md). Generates post-RoPE keys, values, decode
// queries and prefill queries whose attention reproduces what the papers report about real long-context
// models: attention sinks, a RoPE recency component, topical clusters recurring across the context,
// isolated "needle" tokens, queries out of distribution for the keys (Mahalanobis), smoothly drifting
// decode queries, GQA groups sharing a query component, and heads ranging from diffuse to very peaked.
//
// Everything is a deterministic function of the parameters (seed included): arrays do not depend on
// the number of threads. Random streams are keyed by (seed, purpose, layer, head, token), so one
// layer can be generated without the others.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trace/trace.hpp"

namespace retro {

/// Parameters of the generator. Units: the per-dimension standard deviation of a key's semantic content
/// is 1 (before RoPE); "logits" are scores q.k / sqrt(head_dim).
struct SynthParams {
    // ---- shape -------------------------------------------------------------------------------------
    std::string preset_name = "llama3-8b";  ///< JSON key "preset"; model attribute "synthetic-<preset>"
    int num_layers = 2;                ///< layers generated (0 .. num_layers-1)
    int num_q_heads = 32;
    int num_kv_heads = 8;
    int head_dim = 128;           ///< even; RoPE pairs are (j, j + head_dim/2) (half_split)
    double rope_theta = 500000.0;
    int prompt_len = 16384;
    int decode_steps = 32;
    int prefill_queries = 64;     ///< last n prompt queries (positions prompt_len-n .. prompt_len-1)
    std::string dtype = "float16";  ///< float16 | bfloat16 | float32
    uint64_t seed = 1;

    // ---- attention sinks -----------------------------------------------------------------------------
    int sink_tokens = 4;          ///< tokens 0..sink_tokens-1 are sinks (token 0 the strongest)
    std::string sink_mode = "offset";  ///< how a sink wins: "offset" = sink keys carry an extra vector the
                                       ///< queries align with; "mean" = sink keys lack the key mean of the
                                       ///< low band and queries point away from that mean (what real
                                       ///< models do: docs/synth.md)
    double sink_mass_min = 0.10;  ///< per query head, the target share of attention on the sinks is
    double sink_mass_max = 0.50;  ///< drawn uniformly from [min, max] (calibrated at decode step 0)

    // ---- recency (RoPE local band) ---------------------------------------------------------------------
    int local_window = 64;        ///< range of the recency component in tokens: RoPE pairs with
                                  ///< frequency >= 1/local_window carry it
    double local_mass_min = 0.03;  ///< per query head, the target share of the non-sink attention on
    double local_mass_max = 0.30;  ///< the last local_window tokens, uniform in [min, max]
    double recency_span_factor = 4.0;  ///< the recency kernel's lowest RoPE frequency is
                                       ///< 1/(recency_span_factor * local_window): larger = longer tail

    // ---- head sparsity ---------------------------------------------------------------------------------
    double sharp_min = 1.6;        ///< std (logits) of a head's semantic scores over tokens ranges
    double sharp_max = 5.0;        ///< over [sharp_min, sharp_max]
    double peaked_fraction = 0.6;  ///< share of heads drawn from the top 40% of that range (peaked);
                                   ///< the others from the bottom 40% (diffuse)

    // ---- layer profile (real models differ by depth; the defaults make every layer alike) ----------
    int diffuse_layers = 0;          ///< layers 0 .. diffuse_layers-1: every head diffuse, sharpness
    double diffuse_sharpness = 0.8;  ///< uniform in [diffuse_sharpness / 2, diffuse_sharpness]
    double sink_onset = 0.0;         ///< layers below sink_onset * num_layers have no attention sink
                                     ///< (sink target 0: the sink tokens get their natural share)

    // ---- topics (the text) ---------------------------------------------------------------------------
    double topic_run = 128.0;       ///< mean length in tokens of a contiguous run of one topic
    double topic_new_prob = 0.3;    ///< at a topic switch: probability of a new topic (else a
                                    ///< previously seen one, uniformly: topics recur)
    double topic_share = 0.4;       ///< share of the key's semantic variance that is topic-level
    int vocab_size = 4096;          ///< word types; each token draws one uniformly (repeated words)
    double word_share = 0.4;        ///< share of the key's semantic variance given by its word type
                                    ///< (the rest, 1 - topic_share - word_share, is token-specific)
    double key_salience_sigma = 0.3;  ///< lognormal spread of per-token key content scale

    // ---- queries -------------------------------------------------------------------------------------
    double focus_ar = 0.98;     ///< AR(1) coefficient of the query focus per position (drift)
    double gqa_shared = 0.6;    ///< share of the focus variance common to a GQA group
    double query_offset = 9.0;  ///< norm of each query head's mean offset in the low-variance key band

    // ---- needles -------------------------------------------------------------------------------------
    int num_needles = 8;                ///< isolated tokens with a distinctive key
    double needle_rate = 0.05;          ///< per position: probability a GQA group starts targeting one
    double needle_persist = 0.6;        ///< per position: probability targeting continues
    double needle_head_fraction = 0.5;  ///< share of query heads that follow their group's target
    double needle_z = 6.0;              ///< needle logit, in the head's semantic stds above the mean
    int needle_span = 1;                ///< tokens per needle: a needle is a passage of consecutive tokens
                                        ///< sharing its key direction and value (a phrase to copy)

    // ---- key / value magnitudes ------------------------------------------------------------------------
    double key_mean = 2.0;         ///< per-dimension std of the shared (pre-RoPE) key mean vector
    double key_mean_low_gain = 1.0;  ///< key mean std in the low band (pairs turning <= 1 rad over the
                                     ///< trace) is key_mean times this (real keys: a large low-band mean)
    double key_mean_jitter = 0.0;  ///< per-token relative std of the low-band mean a key carries
    double key_noise = 0.1;        ///< isotropic key/query noise std per dimension
    double query_noise_gain = 1.0;  ///< the queries' per-step isotropic noise std is key_noise times this
    double value_mean = 0.5;       ///< per-dimension std of the shared value mean vector
    double value_topic = 1.0;      ///< per-dimension std of topic value vectors
    double value_noise = 1.0;      ///< per-dimension std of token value noise
    double sink_value_scale = 0.2;  ///< sink values are this times a normal value (small, as in real models)
    double needle_value = 3.0;     ///< per-dimension std of a needle's distinctive value

    /// Throws ParamError naming the parameter, its value and the valid range.
    void validate() const;
    nlohmann::json to_json() const;
    /// Accepts {"preset": name, ...overrides}; the preset (default llama3-8b) is applied first. Throws
    /// ConfigError on unknown keys (naming them) and on values of the wrong type. Does not validate().
    static SynthParams from_json(const nlohmann::json& j);
    /// "llama3-8b": 32 q / 8 kv heads, head_dim 128, theta 500000; "smollm2": 9 q / 3 kv heads,
    /// head_dim 64, theta 100000. Throws ParamError on other names.
    static SynthParams preset(const std::string& name);
    static std::vector<std::string> preset_names();

    int n_tokens() const { return prompt_len + decode_steps; }
};

/// What the generator drew for one query head (the hidden "ground truth", for tests and docs).
struct SynthHeadInfo {
    double sharpness = 0;    ///< target std of semantic scores (logits)
    bool peaked = false;     ///< drawn from the peaked regime
    double sink_target = 0;  ///< target sink mass at the calibration query
    double local_target = 0;  ///< target share of non-sink mass on the last local_window tokens
    double needle_affinity = 0;  ///< 0 = ignores needles; else scale of the needle logit
    // calibrated query coefficients
    double beta = 0, lambda = 0, sink_coef = 0, needle_coef = 0;
};

/// One layer's arrays, float32 row-major.
struct SynthLayer {
    int layer = 0;
    std::vector<float> keys;     ///< [num_kv_heads, n_tokens, head_dim], post-RoPE
    std::vector<float> values;   ///< [num_kv_heads, n_tokens, head_dim]
    std::vector<float> queries;  ///< [num_q_heads, decode_steps, head_dim], post-RoPE
    std::vector<float> prefill_queries;  ///< [num_q_heads, prefill_queries, head_dim], post-RoPE
    std::vector<SynthHeadInfo> heads;    ///< [num_q_heads]
};

/// Structure of the synthetic text shared by all layers and heads.
struct SynthText {
    std::vector<int> topic;    ///< [n_tokens] topic id of each token
    std::vector<int> word;     ///< [n_tokens] word type of each token (0 .. vocab_size-1)
    std::vector<int> needles;  ///< first positions of the needles (each needle_span tokens), ascending
    int num_topics = 0;        ///< distinct topic ids used (ids are 0..num_topics-1)
};

SynthText synth_text(const SynthParams& p);

namespace synth_detail {
struct LayerContext;
}

/// One layer's synthetic data a KV head at a time: what synthesize() streams to disk, so generating a
/// trace holds one head's arrays, not a layer's. Deterministic in (p, layer, kv_head); head(g) equals
/// synth_head_slice(p, synthesize_layer(p, layer), g) bit for bit (synthesize_layer is built on it).
class SynthLayerHeads {
  public:
    /// Validates `p` and `layer` (ParamError) and derives what every head of the layer shares (RoPE
    /// table, text, needles).
    SynthLayerHeads(const SynthParams& p, int layer);
    ~SynthLayerHeads();
    SynthLayerHeads(const SynthLayerHeads&) = delete;
    SynthLayerHeads& operator=(const SynthLayerHeads&) = delete;

    /// KV head `kv_head`: keys, values [n_tokens, head_dim]; its GQA group's queries
    /// [group, decode_steps, head_dim] and prefill queries [group, prefill_queries, head_dim].
    /// `infos` (optional) receives the group's query heads' draws [group].
    HeadSlice head(int kv_head, std::vector<SynthHeadInfo>* infos = nullptr) const;

  private:
    SynthParams p_;
    std::unique_ptr<synth_detail::LayerContext> c_;
};

/// Generates one layer in memory (validates `p`). Deterministic in (p, layer).
SynthLayer synthesize_layer(const SynthParams& p, int layer);

/// The HeadSlice (one KV head with its GQA group's queries) of a generated layer, as TraceReader would
/// return it from the written file (up to storage rounding).
HeadSlice synth_head_slice(const SynthParams& p, const SynthLayer& L, int kv_head);

/// The root attributes synthesize() writes (layers 0..num_layers-1).
TraceInfo synth_trace_info(const SynthParams& p);

/// Validates `p`, generates every layer a KV head at a time (SynthLayerHeads) and writes the trace to
/// `path` (atomically, via TraceWriter's streaming writes). `stop` (optional) is polled between heads;
/// when it returns true the generation throws Interrupted and leaves no file (the temp file is removed).
void synthesize(const SynthParams& p, const std::string& path, const std::function<bool()>& stop = {});

}  // namespace retro
