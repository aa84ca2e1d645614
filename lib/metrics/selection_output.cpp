#include "metrics/selection_output.hpp"

#include <algorithm>
#include <cmath>
#include <span>

#include "attention/attention.hpp"
#include "core/error.hpp"

namespace retro {

void selection_outputs(const float* queries, const KVView& kv, const Selection& sel, int group, float scale,
                       float* out, double* lse, GroupScratch& scratch) {
    const int d = kv.d;
    std::vector<std::span<const int32_t>> lists((size_t)group);
    std::vector<const float*> log_w;
    for (int g = 0; g < group; ++g) lists[(size_t)g] = sel.exact_for(g);
    if (!sel.exact_log_weight.empty())
        for (int g = 0; g < group; ++g) log_w.push_back(sel.log_weight_for(g));
    std::vector<PartialAttention> parts =
        group_partial_attention(queries, group, kv.keys, kv.values, d, scale, lists, log_w, scratch);
    for (int g = 0; g < group; ++g) {
        PartialAttention& p = parts[(size_t)g];
        const float* q = queries + (size_t)g * d;
        for (const auto& c : sel.estimated) {
            float s = 0;
            for (int j = 0; j < d; ++j) s += q[j] * c.centroid[j];
            add_estimated_cluster(p, (double)scale * s, c.size, c.value_sum, d);
        }
        p.output(out + (size_t)g * d);
        lse[g] = p.lse();
    }
}

void check_selection(const Selection& sel, const std::string& method, int group, int n, int step,
                     SelectionCheckScratch& scratch) {
    if (!sel.exact.empty() && sel.exact.size() != 1 && sel.exact.size() != (size_t)group)
        throw Error("method '" + method + "' returned " + std::to_string(sel.exact.size()) +
                    " exact lists; expected 1 (shared) or " + std::to_string(group) +
                    " (one per query head)");
    if (!sel.exact_log_weight.empty()) {
        bool ok = sel.exact_log_weight.size() == sel.exact.size();
        for (size_t l = 0; ok && l < sel.exact.size(); ++l)
            ok = sel.exact_log_weight[l].size() == sel.exact[l].size();
        if (!ok)
            throw Error("method '" + method + "' returned exact_log_weight lists that do not match its exact lists");
        for (const auto& l : sel.exact_log_weight)
            for (float w : l)
                if (!std::isfinite(w))
                    throw Error("method '" + method + "' returned a non-finite log weight at step " + std::to_string(step));
    }
    // Validate every list: ids in [0, n) and unique (a method cannot inflate recall with duplicates).
    auto& stamp = scratch.stamp;
    if (stamp.size() < (size_t)n) stamp.assign((size_t)n, 0);
    for (size_t l = 0; l < sel.exact.size(); ++l) {
        if (++scratch.gen == 0) {
            std::fill(stamp.begin(), stamp.end(), 0);
            scratch.gen = 1;
        }
        for (int32_t id : sel.exact[l]) {
            if (id < 0 || id >= n)
                throw Error("method '" + method + "' selected token " + std::to_string(id) + " at step " +
                            std::to_string(step) + "; visible tokens are [0, " + std::to_string(n) + ")");
            if (stamp[(size_t)id] == scratch.gen)
                throw Error("method '" + method + "' selected token " + std::to_string(id) + " twice at step " +
                            std::to_string(step) + " (duplicates are not allowed)");
            stamp[(size_t)id] = scratch.gen;
        }
    }
}

}  // namespace retro
