#include "bench/shard.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

#include "bench/runner.hpp"
#include "core/error.hpp"

namespace retro {

namespace {
bool parse_nonneg(const std::string& s, int& out) {
    if (s.empty() || s.size() > 9) return false;
    for (char c : s)
        if (c < '0' || c > '9') return false;
    out = std::stoi(s);
    return true;
}
}  // namespace

ShardSpec parse_shard(const std::string& text) {
    const auto slash = text.find('/');
    ShardSpec s;
    const std::string form = "--shard '" + text + "': expected I/N with 0 <= I < N (shard I of N, counted from 0), e.g. 0/4";
    if (slash == std::string::npos || !parse_nonneg(text.substr(0, slash), s.index) ||
        !parse_nonneg(text.substr(slash + 1), s.count))
        throw ConfigError(form);
    if (s.count == 0) throw ConfigError(form + " (N must be at least 1)");
    if (s.index >= s.count)
        throw ConfigError(form + " (shard " + std::to_string(s.index) + " does not exist: the shards are 0.." +
                          std::to_string(s.count - 1) + ")");
    return s;
}

uint64_t method_cost_weight(const std::string& method) {
    // Per token and decode step, relative to full attention (= 4: its select plus the exact reference
    // it is evaluated against). Set by hand from each method's index type (a k-means or graph build
    // costs several full passes); docs/cluster.md compares them with measured times.
    static const std::map<std::string, uint64_t> w = {
        {"full", 4},        {"oracle_topk", 5},  {"streaming", 2},   {"quest", 4},
        {"wave", 12},       {"pq", 12},          {"magicpig", 12},   {"ctkvr", 12},
        {"faiss_flat", 6},  {"faiss_ivf", 12},   {"faiss_hnsw", 24}, {"retrieval_attention", 24},
    };
    const auto it = w.find(method);
    return it == w.end() ? 24 : it->second;
}

std::vector<ShardUnit> sweep_units(const RunConfig& cfg, const std::vector<PreparedTrace>& traces,
                                   bool whole_layers) {
    std::vector<ShardUnit> units;
    for (size_t ti = 0; ti < traces.size(); ++ti) {
        const PreparedTrace& t = traces[ti];
        // tokens: keys visible over the evaluated steps (the prompt plus the steps' growth)
        const uint64_t last = t.steps.empty() ? 0 : (uint64_t)t.steps.back() + 1;
        const uint64_t tokens = ((uint64_t)t.info.prompt_len + last) * (uint64_t)std::max<size_t>(1, t.steps.size());
        const std::vector<int> all_heads = {-1};
        for (int l : t.layers)
            for (int h : whole_layers ? all_heads : t.kv_heads)
                for (size_t r = 0; r < cfg.runs.size(); ++r) {
                    const uint64_t heads = whole_layers ? (uint64_t)t.kv_heads.size() : 1;
                    units.push_back({ti, r, l, h, tokens * heads * method_cost_weight(cfg.runs[r].method)});
                }
    }
    return units;
}

std::vector<int> assign_shards(const std::vector<uint64_t>& cost, const std::vector<size_t>& group, int count) {
    if (count < 1) throw ConfigError("shard count must be at least 1");
    if (group.size() != cost.size()) throw Error("assign_shards: cost and group sizes differ");
    // The items to place: whole groups when there are enough of them, else single units.
    const size_t ngroups = group.empty() ? 0 : *std::max_element(group.begin(), group.end()) + 1;
    const bool by_group = ngroups >= 4 * (size_t)count;
    const size_t nitems = by_group ? ngroups : cost.size();
    std::vector<uint64_t> item_cost(nitems, 0);
    for (size_t i = 0; i < cost.size(); ++i) item_cost[by_group ? group[i] : i] += cost[i];
    std::vector<size_t> order(nitems);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return item_cost[a] > item_cost[b]; });
    std::vector<uint64_t> load((size_t)count, 0);
    std::vector<int> item_shard(nitems, 0);
    for (size_t it : order) {
        const auto least = std::min_element(load.begin(), load.end());  // first minimum: lowest index
        item_shard[it] = (int)(least - load.begin());
        *least += item_cost[it];
    }
    std::vector<int> shard(cost.size());
    for (size_t i = 0; i < cost.size(); ++i) shard[i] = item_shard[by_group ? group[i] : i];
    return shard;
}

std::vector<int> assign_shards(const std::vector<ShardUnit>& units, int count) {
    std::vector<uint64_t> cost;
    std::vector<size_t> group;
    std::map<std::tuple<size_t, int, int>, size_t> head_index;  // (trace, layer, kv_head) -> group
    for (const auto& u : units) {
        cost.push_back(u.cost);
        const auto key = std::make_tuple(u.trace, u.layer, u.kv_head);
        const auto it = head_index.try_emplace(key, head_index.size()).first;
        group.push_back(it->second);
    }
    return assign_shards(cost, group, count);
}

std::vector<uint64_t> shard_loads(const std::vector<ShardUnit>& units, int count) {
    const auto shard = assign_shards(units, count);
    std::vector<uint64_t> load((size_t)count, 0);
    for (size_t i = 0; i < units.size(); ++i) load[(size_t)shard[i]] += units[i].cost;
    return load;
}

}  // namespace retro
