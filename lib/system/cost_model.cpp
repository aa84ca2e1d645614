#include "system/cost_model.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace retro {

using json = nlohmann::json;

Overlap overlap_for_method(const std::string& method, const json& params) {
    if (method == "wave") return Overlap::wave;
    if (method == "full" && params.is_object() && params.value("offloaded", false)) return Overlap::stream;
    return Overlap::serial;
}

const std::vector<ModelShape>& model_shapes() {
    static const std::vector<ModelShape> m = {
        {"llama3-8b", 32, 32, 8, 128, 16.06e9,
         "Meta-Llama-3-8B config.json (32 layers, 32 heads, 8 KV heads, hidden 4096); 8.03B params x 2 B. "
         "Llama3-8B-1048K (Gradient) has the same shape"},
        {"llama3.1-8b", 32, 32, 8, 128, 16.06e9, "Llama-3.1-8B config.json (same shape as Llama-3-8B)"},
        {"qwen2.5-7b", 28, 28, 4, 128, 15.23e9,
         "Qwen2.5-7B config.json (28 layers, 28 heads, 4 KV heads, hidden 3584); 7.61B params x 2 B"},
        {"qwen2.5-72b", 80, 64, 8, 128, 145.4e9,
         "Qwen2.5-72B config.json (80 layers, 64 heads, 8 KV heads, hidden 8192); 72.7B params x 2 B"},
    };
    return m;
}

const ModelShape& find_model_shape(const std::string& name) {
    for (const auto& m : model_shapes())
        if (m.name == name) return m;
    std::string known;
    for (const auto& m : model_shapes()) known += (known.empty() ? "" : ", ") + m.name;
    throw ConfigError("model shape '" + name + "' unknown (known: " + known + ")");
}

json throughput_table(const PerTokenWork& w, Overlap overlap, double lookup_ns, int group, const ModelShape& s,
                      double elem_bytes, const std::vector<int>& contexts, const std::vector<int>& batches,
                      const HardwareProfile& hw) {
    const double tok = 2.0 * s.head_dim * elem_bytes;  // KV bytes of one token of one KV head
    const double H = s.kv_heads;
    const double avail = (hw.gpu_memory_GiB - hw.gpu_memory_reserved_GiB) * 1073741824.0 - s.weight_bytes;
    json rows = json::array(), best = json::object(), max_batch = json::object();
    for (int N : contexts) {
        LayerWork lw;
        lw.overlap = overlap;
        const double attend = w.attend_kv * N * tok * H, index = w.index_kv * N * tok * H;
        lw.gpu_read_bytes = attend + index;
        lw.gpu_flops = (double)group * lw.gpu_read_bytes;  // 2 FLOPs per 16-bit element per query head
        lw.h2d_bytes = w.h2d_kv * N * tok * H;
        lw.d2h_bytes = w.d2h_bytes * N * H;
        lw.cpu_us = w.lookup_units * N * H * lookup_ns * 1e-3;
        lw.resident_bytes = w.resident_kv * N * tok * H;
        const double per_seq = lw.resident_bytes * s.layers;
        const long bmax = avail <= 0 ? 0 : per_seq <= 0 ? 1L << 30 : (long)std::floor(avail / per_seq);
        // null: no GPU-memory limit (nothing per sequence stays on the GPU)
        max_batch[std::to_string(N)] = per_seq <= 0 && avail > 0 ? json(nullptr) : json(bmax);
        json b_best;
        for (int B : batches) {
            json row = {{"context", N}, {"batch", B}};
            if (B > bmax) {
                row["tokens_per_s"] = nullptr;
                row["oom"] = true;
            } else {
                const LayerTime t = layer_time(lw, index, B, hw, s.weight_bytes / s.layers);
                const double step_us = t.total_us * s.layers;
                const double tps = B / (step_us * 1e-6);
                row["tokens_per_s"] = tps;
                row["oom"] = false;
                row["layer_us"] = t.total_us;
                row["attention_us"] = t.attention_us;
                row["h2d_us"] = t.h2d_us;
                row["bound"] = t.bound;
                if (b_best.is_null() || tps > b_best["tokens_per_s"].get<double>())
                    b_best = {{"batch", B}, {"tokens_per_s", tps}};
            }
            rows.push_back(row);
        }
        best[std::to_string(N)] = b_best;
    }
    return {{"model", s.name}, {"hardware", hw.name}, {"overlap", overlap_name(overlap)},
            {"gpu_bytes_per_seq_per_token", w.resident_kv * tok * H * s.layers},
            {"max_batch", max_batch}, {"best", best}, {"rows", rows}};
}

}  // namespace retro
