#pragma once
// In-memory types of trace format v1 (docs/trace-format.md). A trace holds, per dumped layer, the
// post-RoPE keys and values of every token (prompt + decode steps), the decode queries of every query
// head and optionally the last prefill queries. Evaluation works on one HeadSlice at a time: one layer
// x one KV head with the queries of its GQA group, read without touching other heads.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace retro {

enum class DType { f16, bf16, f32 };

const char* dtype_name(DType t);            ///< "float16" | "bfloat16" | "float32"
DType parse_dtype(const std::string& name);  ///< inverse of dtype_name; throws Error on others
size_t dtype_bytes(DType t);                 ///< 2, 2, 4

/// Root attributes of a trace (DESIGN §4) plus what the reader learns from the layer groups.
struct TraceInfo {
    std::string path;  ///< file it was read from (empty for a trace being written)
    int version = 1;
    std::string model = "unknown";
    int num_layers = 0;    ///< layers of the model (the trace may hold only some of them)
    int num_q_heads = 0;   ///< query heads per layer
    int num_kv_heads = 0;  ///< key/value heads per layer; must divide num_q_heads
    int head_dim = 0;
    int prompt_len = 0;        ///< tokens in the prompt (prefill)
    int num_decode_steps = 0;  ///< decode steps; n_tokens = prompt_len + num_decode_steps
    bool rope_applied = true;  ///< keys and queries are post-RoPE
    std::string rope_layout = "half_split";  ///< "half_split" | "interleaved"
    double rope_theta = 10000.0;
    std::string source;  ///< "synthetic:<generator+params>" | "hf:<model id>" | "gguf:<file>"
    DType dtype = DType::f16;  ///< storage dtype of keys/values/queries
    std::vector<int> layers;   ///< layer indices present in the file, ascending
    int num_prefill_queries = 0;  ///< 0 when the trace has no prefill_queries
    int prefill_first_position = 0;  ///< position of the first prefill query (prompt_len - n)
    /// Any other root attributes (string-valued), kept so inspect can show them and writers can add
    /// provenance (generated text, prompt source, generator parameters, ...).
    std::map<std::string, std::string> extra;

    int n_tokens() const { return prompt_len + num_decode_steps; }
    int group_size() const { return num_kv_heads > 0 ? num_q_heads / num_kv_heads : 0; }
};

/// One layer x one KV head, converted to float32. All arrays are row-major.
struct HeadSlice {
    int layer = 0;
    int kv_head = 0;
    int head_dim = 0;
    int prompt_len = 0;
    int num_steps = 0;  ///< decode steps present in `queries`
    int group = 0;      ///< query heads in this KV head's GQA group
    int first_q_head = 0;  ///< global index of the group's first query head (= kv_head * group)
    std::vector<float> keys;     ///< [n_tokens, head_dim], n_tokens = prompt_len + num_steps
    std::vector<float> values;   ///< [n_tokens, head_dim]
    std::vector<float> queries;  ///< [group, num_steps, head_dim]; step t sees tokens [0, prompt_len + t]
    int num_prefill = 0;         ///< 0 when absent or not requested
    int prefill_first_position = 0;
    std::vector<float> prefill_queries;  ///< [group, num_prefill, head_dim]

    int n_tokens() const { return prompt_len + num_steps; }
    /// Tokens visible to decode step t (its own key included).
    int visible(int t) const { return prompt_len + t + 1; }
    const float* key(int i) const { return keys.data() + (size_t)i * head_dim; }
    const float* value(int i) const { return values.data() + (size_t)i * head_dim; }
    /// Query of group member g (0..group-1) at decode step t: [head_dim].
    const float* query(int g, int t) const {
        return queries.data() + ((size_t)g * num_steps + t) * head_dim;
    }
    const float* prefill_query(int g, int j) const {
        return prefill_queries.data() + ((size_t)g * num_prefill + j) * head_dim;
    }
};

}  // namespace retro
