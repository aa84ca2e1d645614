#pragma once
// Internal to lib/trace/synth*.cpp: the stages synthesize_layer() (synth.cpp) runs, in order, and what
// they share. Each stage's comment names the real-trace statistic it exists to reproduce (docs/synth.md
// "How the default traces compare with the papers", docs/traces.md "Synthetic vs real").
//
//   LayerContext        parameters, bands, RoPE table, text                       (synth.cpp)
//   draw_head           per query head: sharpness, sink and local targets          (synth_head.cpp)
//   kv_constants        per KV head: key mean, sink direction, topic/word/needle   (synth_keys.cpp)
//   synth_kv_head       every token's key and value of one KV head                 (synth_keys.cpp)
//   group_queries       per KV head: the group's shared focus and needle schedule  (synth_queries.cpp)
//   synth_query_head    per query head: components, calibration, the queries      (synth_queries.cpp)
//     calibrate_head    fits beta, lambda and the sink coefficient to the targets  (synth_head.cpp)
#include <vector>

#include "trace/synth.hpp"
#include "trace/synth_bands.hpp"

namespace retro::synth_detail {

constexpr double kNeedleKeySd = 3.0;  ///< per-dim std of a needle's key direction (needle pairs)
constexpr double kSinkFirst = 1.0, kSinkOther = 0.8;  ///< relative sink key offsets (token 0 strongest)

/// What every stage of one layer reads: the parameters and what is derived from them.
struct LayerContext {
    const SynthParams& p;
    int layer = 0;
    int d = 0, n = 0;          ///< head_dim, tokens (prompt + decode)
    int H = 0, G = 0, grp = 0;  ///< query heads, KV heads, query heads per KV head
    int npf = 0, steps = 0;    ///< prefill queries, decode steps
    int q0 = 0, nq = 0;        ///< query process positions [q0, prompt_len + steps): prefill then decode
    Bands B;
    int P = 0;                 ///< RoPE pairs
    int sd = 0;                ///< semantic dims (2 B.s_pairs())
    RopeTable rope;            ///< positions [0, n)
    SynthText text;
    std::vector<int> needle_at;  ///< [n] needle index at each position (-1 = none)
    int T = 0, NN = 0;         ///< topics, needles
    float inv_sqrt_d = 0;
    double A_sink = 0;         ///< sink key offset norm (key units), sink_mode "offset"
    bool sink_by_mean = false;
    double ts = 0, ws = 0, es = 0;  ///< sqrt of the topic, word and token-specific shares of semantic variance
    LayerContext(const SynthParams& p, int layer);
};

/// Per KV head constants, pre-RoPE.
struct KvConst {
    std::vector<float> mu_k, e_s, mu_v;     ///< [d] key mean, unit sink direction, value mean
    std::vector<float> topic_k;             ///< [T, d] (semantic pairs only)
    std::vector<float> word_k;              ///< [V, d] (semantic pairs only)
    std::vector<float> topic_v;             ///< [T, d]
    std::vector<float> needle_k, needle_v;  ///< [NN, d]
};

/// Per KV head, the query processes its GQA group shares.
struct GroupQueries {
    std::vector<float> focus;  ///< [nq, sd] shared AR(1) semantic focus
    std::vector<int> target;   ///< [nq] needle targeted at each query position (-1 none)
};

/// A HeadSlice's shape fields (layer, KV head, sizes, group, prefill positions) without data; ParamError
/// when kv_head is out of range.
HeadSlice head_slice_shape(const SynthParams& p, int layer, int kv_head);

/// Draws of one query head (stream kHeadParam(layer, q_head)); coefficients are fitted later.
SynthHeadInfo draw_head(const SynthParams& p, int layer, int qh);

/// KV head g's constants (streams kKeyMean, kSinkDir, kValMean, kTopicKey/Val, kWordKey, kNeedleKey/Val).
KvConst kv_constants(const LayerContext& c, int g);

/// Writes KV head g's post-RoPE key and value of every token: keys, values [n, d]. Each token's draws
/// come from streams keyed by (layer, g, token), so heads are generated independently of each other.
void synth_kv_head(const LayerContext& c, const KvConst& kv, int g, float* keys, float* values);

/// KV head g's shared query focus and needle schedule.
GroupQueries group_queries(const LayerContext& c, int g);

/// The pre-RoPE components of query head h's queries (docs/synth.md, "Queries"): semantic focus (unit
/// beta), recency carrier (unit lambda), sink direction (unit sink coefficient) and the fixed part.
struct QueryComponents {
    const LayerContext& c;
    const KvConst& kv;
    const GroupQueries& group;
    int h = 0;
    std::vector<float> own;     ///< [nq, sd] the head's own AR(1) focus
    std::vector<float> local;   ///< [d] recency carrier: the key mean's carrier pairs
    std::vector<float> offset;  ///< [d] mean offset in Z, orthogonal to the sink direction
    QueryComponents(const LayerContext& c, const KvConst& kv, const GroupQueries& group, int h);
    /// x [d] = semantic focus at process index t (unit beta).
    void semantic(int t, float* x) const;
    /// y [d] = offset + per-step noise + the needle term (uses info.needle_affinity, info.needle_coef).
    void fixed_part(int t, const SynthHeadInfo& info, float* y) const;
};

/// Fits info.beta, info.lambda and info.sink_coef (docs/synth.md "Per-head draws and calibration").
/// K: [n, d] the head's post-RoPE keys.
void calibrate_head(const QueryComponents& q, const float* K, SynthHeadInfo& info);

/// Query head h: its components, calibration and post-RoPE queries, written to queries [steps, d] and
/// prefill_queries [npf, d] (head h's own rows). K: [n, d] the keys of h's KV head.
void synth_query_head(const LayerContext& c, const KvConst& kv, const GroupQueries& group, int h,
                      const float* K, SynthHeadInfo& info, float* queries, float* prefill_queries);

}  // namespace retro::synth_detail
