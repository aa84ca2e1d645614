#include "system/head_system.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace retro {

CacheParams head_cache_params(const SystemParams& sp, int head_dim, double elem_bytes, int prompt_len, int& block_tokens) {
    // One block holds block_bytes of keys (and a parallel block the values): 2 KB = 8 x 128 x fp16.
    block_tokens = cache_block_tokens(sp.block_bytes, head_dim, elem_bytes);
    CacheParams c;
    c.capacity_slots = cache_capacity_slots(sp.cache, sp.cache_bytes, prompt_len, head_dim, elem_bytes, block_tokens);
    c.policy = sp.cache_policy();
    c.admit_cap_slots = (int64_t)sp.admit_cap * block_tokens;
    return c;
}

HeadSystem::HeadSystem(const SystemParams& sp, const HardwareProfile& hw, const HeadSystemContext& c)
    : sp_(sp), hw_(hw), c_(c), overlap_(overlap_for_method(c.method, c.params)) {
    cache_ = head_cache_params(sp_, c_.head_dim, c_.elem_bytes, c_.prompt_len, block_tokens_);
}

void HeadSystem::record(const Selection& sel, int n, const Footprint& fp) {
    StepRec r;
    r.n = n;
    r.h2d = sel.h2d_bytes;
    r.d2h = sel.d2h_bytes;
    r.gpu_bytes = fp.gpu_bytes;
    // exact attention reads the union of the group's lists once (grouped decode kernel)
    if (sel.exact.size() == 1) {
        r.exact_tokens = (double)sel.exact[0].size();
    } else {
        std::unordered_set<int32_t> u;
        for (const auto& l : sel.exact) u.insert(l.begin(), l.end());
        r.exact_tokens = (double)u.size();
    }
    // Selection work on the GPU: inner products over the group read each scored vector once; a cluster
    // estimate reads its centroid and value sum. oracle_topk's selection is an idealized free oracle.
    const double el = c_.elem_bytes, d = c_.head_dim;
    if (c_.method != "oracle_topk")
        r.index_bytes = sel.scan_ops / std::max(1, c_.group) * d * el + (double)sel.estimated.size() * 2.0 * d * el;
    std::vector<UnitRequest> req;
    if (!sel.fetch_units.empty()) {
        req.reserve(sel.fetch_units.size());
        for (size_t i = 0; i < sel.fetch_units.size(); ++i) {
            const int32_t t = i < sel.fetch_unit_tokens.size() ? sel.fetch_unit_tokens[i] : 0;
            req.push_back({sel.fetch_units[i], t, unit_slots(t, block_tokens_)});
            r.needed_tokens += t;
        }
    } else if (!sel.fetch_tokens.empty()) {
        token_unit_requests(sel.fetch_tokens, sp_.token_block, sp_.miss_moves == "needed", n, req);
        r.needed_tokens = (double)sel.fetch_tokens.size();
    }
    if (!req.empty()) uses_cache_ = true;
    reqs_.push_back(std::move(req));
    steps_.push_back(r);
}

void HeadSystem::finish(std::map<std::string, std::vector<double>>& kv) const {
    const double tok = 2.0 * c_.head_dim * c_.elem_bytes;
    std::vector<StepTraffic> tr;
    if (uses_cache_) tr = simulate_cache(reqs_, cache_);
    const double cache_bytes = uses_cache_ ? (double)cache_.capacity_slots * tok : 0.0;
    for (size_t i = 0; i < steps_.size(); ++i) {
        const StepRec& r = steps_[i];
        double h2d = r.h2d;
        if (uses_cache_) {
            // the method's own figure minus the KV it asked for, plus what actually missed
            h2d = std::max(0.0, r.h2d - r.needed_tokens * tok) + (double)tr[i].miss_tokens * tok;
            if (!reqs_[i].empty()) kv["cache_hit"].push_back(tr[i].hit_ratio());
        }
        kv["fetch_bytes"].push_back(r.h2d);
        kv["h2d_bytes"].push_back(h2d);
        kv["d2h_bytes"].push_back(r.d2h);
        kv["gpu_bytes"].push_back(r.gpu_bytes + cache_bytes);
        kv["fetch_units"].push_back((double)reqs_[i].size());
        const double attend = r.exact_tokens * tok;
        kv["gpu_read_bytes"].push_back(attend + r.index_bytes);
        // model_us: one layer, batch 1, every KV head of the layer like this one, attention part only
        const double H = c_.num_kv_heads;
        LayerWork w;
        w.overlap = overlap_;
        w.gpu_read_bytes = H * (attend + r.index_bytes);
        w.gpu_flops = (double)c_.group * w.gpu_read_bytes;
        w.h2d_bytes = H * h2d;
        w.d2h_bytes = H * r.d2h;
        w.cpu_us = H * (double)reqs_[i].size() * sp_.lookup_ns * 1e-3;
        const LayerTime t = layer_time(w, H * r.index_bytes, 1, hw_, 0.0);
        kv["model_us"].push_back(t.attention_us);
    }
}

}  // namespace retro

namespace retro {

nlohmann::json record_throughput(const nlohmann::json& metrics, double n, int head_dim, int group,
                                 double elem_bytes, const std::string& method, const nlohmann::json& params,
                                 const nlohmann::json& system_point, const nlohmann::json& throughput,
                                 const HardwareProfile& hw) {
    const ThroughputParams tp = ThroughputParams::from_json(throughput, "system.throughput");
    const SystemParams sp = system_point.is_null() ? SystemParams{} : SystemParams::from_json(system_point, "system");
    auto mean = [&](const char* k) {
        if (!metrics.contains(k) || !metrics[k].contains("mean") || !metrics[k]["mean"].is_number()) return 0.0;
        return metrics[k]["mean"].get<double>();
    };
    const double tok = 2.0 * head_dim * elem_bytes;
    PerTokenWork w;
    // gpu_read_bytes mixes attention and index reads; split by the index share recorded in model terms:
    // index bytes = gpu_read_bytes - exact tokens x tok, exact tokens ~ exact_frac x n (union <= group x)
    const double read = mean("gpu_read_bytes") / (n * tok);
    const double exact = std::min(read, mean("exact_frac"));
    w.attend_kv = exact;
    w.index_kv = std::max(0.0, read - exact);
    w.h2d_kv = mean("h2d_bytes") / (n * tok);
    w.d2h_bytes = mean("d2h_bytes") / n;
    w.lookup_units = mean("fetch_units") / n;
    w.resident_kv = mean("gpu_bytes") / (n * tok);
    std::vector<int> ctx = tp.contexts;
    if (ctx.empty()) ctx.push_back((int)std::lround(n));
    nlohmann::json t = throughput_table(w, overlap_for_method(method, params), sp.lookup_ns, group,
                                        find_model_shape(tp.model), 2.0, ctx, tp.batch, hw);
    t["per_token"] = {{"attend_kv", w.attend_kv}, {"index_kv", w.index_kv}, {"h2d_kv", w.h2d_kv},
                      {"d2h_bytes", w.d2h_bytes}, {"lookup_units", w.lookup_units}, {"resident_kv", w.resident_kv}};
    return t;
}

}  // namespace retro
