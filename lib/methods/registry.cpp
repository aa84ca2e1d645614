#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/error.hpp"
#include "methods/builtin_methods.hpp"
#include "methods/params.hpp"

namespace retro {

namespace {
void check_budgets(const MethodInfo& m, const nlohmann::json& p) {
    // Budgets are numbers: >= 1 absolute, (0,1) fraction. A non-integer >= 1 is almost surely a typo.
    for (const auto& s : m.params) {
        if (s.type != ParamType::number || s.description.find("budget") == std::string::npos) continue;
        const double v = p.at(s.name).get<double>();
        if (v >= 1.0 && v != std::floor(v))
            throw ConfigError("method '" + m.name + "': parameter '" + s.name + "' = " +
                              p.at(s.name).dump() +
                              ": a budget >= 1 is a token count and must be an integer "
                              "(use a value in (0,1) for a fraction)");
    }
}

// Wraps a method's own cross-parameter check with the shared budget check.
MethodInfo with_budget_check(MethodInfo m) {
    auto inner = m.check;
    const MethodInfo copy = m;
    m.check = [inner, copy](const nlohmann::json& p) {
        check_budgets(copy, p);
        if (inner) inner(p);
    };
    return m;
}

// The one list of the methods shipped with the harness, in display order (list-methods, docs). A new
// method adds one line here and its declaration in builtin_methods.hpp (docs/adding-a-method.md).
std::deque<MethodInfo>& registry_storage() {
    static std::deque<MethodInfo> r = [] {
        std::deque<MethodInfo> v;
        for (auto info : {full_method_info, oracle_topk_method_info, streaming_method_info, wave_method_info,
                          retrieval_attention_method_info, ctkvr_method_info, magicpig_method_info,
                          faiss_flat_method_info, faiss_ivf_method_info, faiss_hnsw_method_info, pq_method_info,
                          quest_method_info})
            v.push_back(with_budget_check(info()));
        return v;
    }();
    return r;
}
}  // namespace

const std::deque<MethodInfo>& method_registry() { return registry_storage(); }

void register_method(MethodInfo m) {
    if (m.name.empty()) throw ConfigError("register_method: the method has no name");
    if (!m.make) throw ConfigError("register_method: method '" + m.name + "' has no make function");
    for (const auto& known : registry_storage())
        if (known.name == m.name)
            throw ConfigError("register_method: a method named '" + m.name + "' is already registered");
    registry_storage().push_back(with_budget_check(std::move(m)));
}

namespace {
MethodResolver& resolver_storage() {
    static MethodResolver r;
    return r;
}
const MethodInfo* registered(const std::string& name) {
    for (const auto& m : method_registry())
        if (m.name == name) return &m;
    return nullptr;
}
}  // namespace

void set_method_resolver(MethodResolver r) { resolver_storage() = std::move(r); }

const MethodInfo& find_method(const std::string& name) {
    if (const MethodInfo* m = registered(name)) return *m;
    if (resolver_storage() && resolver_storage()(name))
        if (const MethodInfo* m = registered(name)) return *m;
    std::string known;
    for (const auto& m : method_registry()) known += (known.empty() ? "" : ", ") + m.name;
    throw ConfigError("unknown method '" + name + "' (known: " + known + ")");
}

const char* param_type_name(ParamType t) {
    switch (t) {
        case ParamType::integer: return "int";
        case ParamType::number: return "number";
        case ParamType::boolean: return "bool";
        default: return "string";
    }
}

nlohmann::json resolve_params(const MethodInfo& m, const nlohmann::json& given) {
    if (!given.is_null() && !given.is_object())
        throw ConfigError("method '" + m.name + "': params must be an object, got " + given.dump());
    nlohmann::json out = nlohmann::json::object();
    if (given.is_object()) {
        for (auto it = given.begin(); it != given.end(); ++it) {
            const auto spec = std::find_if(m.params.begin(), m.params.end(),
                                           [&](const ParamSpec& s) { return s.name == it.key(); });
            if (spec == m.params.end()) {
                std::string known;
                for (const auto& s : m.params) known += (known.empty() ? "" : ", ") + s.name;
                throw ConfigError("method '" + m.name + "': unknown parameter '" + it.key() +
                                  "' (parameters: " + (known.empty() ? "none" : known) + ")");
            }
        }
    }
    for (const auto& s : m.params) {
        const bool has = given.is_object() && given.contains(s.name);
        const nlohmann::json v = has ? given.at(s.name) : s.default_value;
        const std::string where = "method '" + m.name + "': parameter '" + s.name + "' = " + v.dump();
        switch (s.type) {
            case ParamType::integer: {
                const bool ok = v.is_number_integer() ||
                                (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
                if (!ok) throw ConfigError(where + ": expected an integer");
                const double x = v.get<double>();
                if (x < s.min || x > s.max)
                    throw ConfigError(where + ": expected a value in [" + nlohmann::json(s.min).dump() +
                                      ", " + nlohmann::json(s.max).dump() + "]");
                out[s.name] = (long long)x;
                break;
            }
            case ParamType::number: {
                if (!v.is_number()) throw ConfigError(where + ": expected a number");
                const double x = v.get<double>();
                if (!std::isfinite(x) || x < s.min || x > s.max)
                    throw ConfigError(where + ": expected a value in [" + nlohmann::json(s.min).dump() +
                                      ", " + nlohmann::json(s.max).dump() + "]");
                out[s.name] = v;
                break;
            }
            case ParamType::boolean:
                if (!v.is_boolean()) throw ConfigError(where + ": expected true or false");
                out[s.name] = v;
                break;
            case ParamType::string: {
                if (!v.is_string()) throw ConfigError(where + ": expected a string");
                const auto str = v.get<std::string>();
                if (!s.choices.empty() &&
                    std::find(s.choices.begin(), s.choices.end(), str) == s.choices.end()) {
                    std::string c;
                    for (const auto& x : s.choices) c += (c.empty() ? "" : "|") + x;
                    throw ConfigError(where + ": expected one of " + c);
                }
                out[s.name] = v;
                break;
            }
        }
    }
    if (m.check) {
        try {
            m.check(out);
        } catch (const ParamError& e) {
            throw ConfigError("method '" + m.name + "': " + e.what());
        }
    }
    return out;
}

void mark_search_params(MethodInfo& m, const std::vector<std::string>& names) {
    for (const auto& n : names) {
        const auto it = std::find_if(m.params.begin(), m.params.end(), [&](const ParamSpec& s) { return s.name == n; });
        if (it == m.params.end())
            throw std::logic_error("method '" + m.name + "': no parameter '" + n + "' to mark search-time");
        it->search = true;
    }
}

nlohmann::json build_params(const MethodInfo& m, const nlohmann::json& params) {
    nlohmann::json out = params;
    for (const auto& s : m.params)
        if (s.search && out.is_object()) out.erase(s.name);
    return out;
}

}  // namespace retro
