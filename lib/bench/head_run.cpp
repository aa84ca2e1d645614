#include "bench/head_run.hpp"

#include <cmath>

#include "core/hash.hpp"
#include "methods/params.hpp"

namespace retro {

MethodContext head_context(const HeadSlice& slice, DType storage) {
    MethodContext ctx;
    ctx.layer = slice.layer;
    ctx.kv_head = slice.kv_head;
    ctx.head_dim = slice.head_dim;
    ctx.group = slice.group;
    ctx.prompt_len = slice.prompt_len;
    ctx.scale = 1.0f / std::sqrt((float)slice.head_dim);
    ctx.storage = storage;
    ctx.slice = &slice;
    return ctx;
}

unsigned method_seed(const std::string& method, const nlohmann::json& params, int layer, int kv_head) {
    const nlohmann::json build = build_params(find_method(method), params);
    return (unsigned)fnv1a64(method + build.dump() + "/" + std::to_string(layer) + "/" + std::to_string(kv_head));
}

HeadPart new_head_part(const std::string& run_id, const HeadSlice& slice, const std::vector<int>& steps,
                       const std::string& trace_fingerprint, const std::vector<MetricInfo>& reg) {
    HeadPart p;
    p.run_id = run_id;
    p.trace_fingerprint = trace_fingerprint;
    p.layer = slice.layer;
    p.kv_head = slice.kv_head;
    for (int h = 0; h < slice.group; ++h) p.q_heads.push_back(slice.first_q_head + h);
    p.steps = steps;
    for (const auto& m : reg) {
        if (m.level == MetricLevel::q_step) p.q_metrics[m.name].assign((size_t)slice.group, {});
        else if (m.level == MetricLevel::kv_step) p.kv_metrics[m.name] = {};
    }
    return p;
}

void add_query_metrics(HeadPart& part, const std::vector<QueryMetrics>& qm, const std::vector<int>& recall_k) {
    for (size_t h = 0; h < qm.size(); ++h) {
        const QueryMetrics& m = qm[h];
        for (size_t k = 0; k < recall_k.size(); ++k)
            part.q_metrics["recall@" + std::to_string(recall_k[k])][h].push_back(m.recall[k]);
        part.q_metrics["mass"][h].push_back(m.mass);
        part.q_metrics["out_err"][h].push_back(m.out_err);
        part.q_metrics["out_cos"][h].push_back(m.out_cos);
        part.q_metrics["lse_err"][h].push_back(m.lse_err);
        part.q_metrics["exact_frac"][h].push_back(m.exact_frac);
        part.q_metrics["est_frac"][h].push_back(m.est_frac);
    }
}

}  // namespace retro
