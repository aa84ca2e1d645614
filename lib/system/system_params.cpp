#include "system/system_params.hpp"

#include <set>

#include "core/error.hpp"
#include "core/json_keys.hpp"

namespace retro {

using json = nlohmann::json;

const std::vector<std::string>& system_axis_keys() {
    static const std::vector<std::string> k = {"cache", "cache_bytes", "policy", "block_bytes",
                                               "token_block", "admit_cap", "lookup_ns", "miss_moves"};
    return k;
}

namespace {
double num(const json& j, const char* key, const std::string& where, double lo, double hi) {
    const json& v = j[key];
    if (!v.is_number())
        throw ConfigError(where + "." + key + " = " + v.dump() + ": expected a number");
    const double x = v.get<double>();
    if (!(x >= lo && x <= hi))
        throw ConfigError(where + "." + key + " = " + v.dump() + ": expected a value in [" +
                          json(lo).dump() + ", " + json(hi).dump() + "]");
    return x;
}
int integer(const json& j, const char* key, const std::string& where, long lo, long hi) {
    const json& v = j[key];
    if (!v.is_number_integer())
        throw ConfigError(where + "." + key + " = " + v.dump() + ": expected an integer");
    const long long x = v.get<long long>();
    if (x < lo || x > hi)
        throw ConfigError(where + "." + key + " = " + v.dump() + ": expected a value in [" +
                          std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return (int)x;
}
}  // namespace

SystemParams SystemParams::from_json(const json& j, const std::string& where) {
    if (!j.is_object()) throw ConfigError(where + ": expected an object");
    std::set<std::string> allowed(system_axis_keys().begin(), system_axis_keys().end());
    allowed.insert("throughput");
    check_keys(j, allowed, where);
    SystemParams p;
    if (j.contains("cache")) p.cache = num(j, "cache", where, 0, 1);
    if (j.contains("cache_bytes")) p.cache_bytes = num(j, "cache_bytes", where, 0, 1e15);
    if (j.contains("policy")) {
        if (!j["policy"].is_string())
            throw ConfigError(where + ".policy = " + j["policy"].dump() + ": expected lru|lfu|fifo|clock|belady");
        p.policy = j["policy"].get<std::string>();
        try {
            parse_cache_policy(p.policy);
        } catch (const ParamError& e) {
            throw ConfigError(where + ": " + e.what());
        }
    }
    if (j.contains("block_bytes")) p.block_bytes = integer(j, "block_bytes", where, 1, 1 << 30);
    if (j.contains("token_block")) p.token_block = integer(j, "token_block", where, 1, 1 << 20);
    if (j.contains("admit_cap")) p.admit_cap = integer(j, "admit_cap", where, 0, 1 << 30);
    if (j.contains("lookup_ns")) p.lookup_ns = num(j, "lookup_ns", where, 0, 1e9);
    if (j.contains("miss_moves")) {
        const json& v = j["miss_moves"];
        if (!v.is_string() || (v.get<std::string>() != "unit" && v.get<std::string>() != "needed"))
            throw ConfigError(where + ".miss_moves = " + v.dump() + ": expected \"unit\" or \"needed\"");
        p.miss_moves = v.get<std::string>();
    }
    return p;
}

json SystemParams::to_json() const {
    json j = {{"cache", cache}, {"cache_bytes", cache_bytes}, {"policy", policy}, {"block_bytes", block_bytes},
              {"token_block", token_block}, {"admit_cap", admit_cap}, {"lookup_ns", lookup_ns}};
    if (miss_moves != "unit") j["miss_moves"] = miss_moves;  // absent at its default: run ids unchanged
    return j;
}

ThroughputParams ThroughputParams::from_json(const json& j, const std::string& where) {
    if (!j.is_object()) throw ConfigError(where + ": expected an object {model, batch, contexts}");
    check_keys(j, {"model", "batch", "contexts"}, where);
    ThroughputParams t;
    if (j.contains("model")) {
        if (!j["model"].is_string()) throw ConfigError(where + ".model: expected a model shape name");
        t.model = j["model"].get<std::string>();
    }
    auto ints = [&](const char* key, std::vector<int>& out) {
        const json& v = j[key];
        if (!v.is_array() || v.empty())
            throw ConfigError(where + "." + key + " = " + v.dump() + ": expected a non-empty list of integers");
        out.clear();
        for (const auto& x : v) {
            if (!x.is_number_integer() || x.get<long long>() < 1 || x.get<long long>() > (1LL << 30))
                throw ConfigError(where + "." + key + ": " + x.dump() + " is not an integer >= 1");
            out.push_back(x.get<int>());
        }
    };
    if (j.contains("batch")) ints("batch", t.batch);
    if (j.contains("contexts")) ints("contexts", t.contexts);
    return t;
}

json ThroughputParams::to_json() const {
    return {{"model", model}, {"batch", batch}, {"contexts", contexts}};
}

}  // namespace retro
