#pragma once
// Method parameters as data: each method declares its parameters (type, default, range or choices,
// description, source) so configs can be validated before any work starts and list-methods can show
// them. Values travel as JSON objects holding every parameter (defaults filled in).
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "methods/method.hpp"

namespace retro {

enum class ParamType { integer, number, boolean, string };

struct ParamSpec {
    std::string name;
    ParamType type = ParamType::number;
    nlohmann::json default_value;
    std::string description;
    std::string source;  ///< where the default comes from (paper section, public code, "ours")
    double min = -std::numeric_limits<double>::infinity();
    double max = std::numeric_limits<double>::infinity();
    std::vector<std::string> choices;  ///< for strings: allowed values (empty = any)
};

struct MethodInfo {
    std::string name;
    std::string description;  ///< one line
    std::string paper;        ///< citation or "-"
    std::vector<ParamSpec> params;
    /// Creates a method from fully resolved parameters.
    std::function<std::unique_ptr<Method>(const nlohmann::json& params)> make;
    /// Optional cross-parameter check on resolved parameters (throws ParamError).
    std::function<void(const nlohmann::json& params)> check;
    /// Optional check of resolved parameters against a trace's shape, the same condition build() would
    /// throw on (pq: m divides head_dim; ctkvr: C prefill queries). `run` and `validate` call it before
    /// any work (lib/bench/preflight.hpp). Throws ParamError.
    std::function<void(const nlohmann::json& params, const TraceInfo& trace)> check_trace;
    /// Optional estimate of the bytes one instance keeps per (layer, KV head) beyond the head's slice
    /// (index, codes, graphs) for the memory check before work; absent = one float32 copy of the keys.
    std::function<double(const nlohmann::json& params, const TraceInfo& trace)> index_bytes;
};

/// Every registered method, in display order: the built-in list of lib/methods/registry.cpp, then any
/// added by register_method.
const std::vector<MethodInfo>& method_registry();

/// Adds a method defined outside the library (a test, an experiment's own code) to the registry, so
/// configs, `run_config` and find_method see it like a built-in one; its check gets the shared budget
/// check. Register before parsing configs or starting runs: references from method_registry() and
/// find_method() may not survive a later registration. Throws ConfigError when `m` has no name or no
/// make function, or when a method of that name is already registered.
void register_method(MethodInfo m);

/// The method named `name`; throws ConfigError listing the known methods.
const MethodInfo& find_method(const std::string& name);

/// Fills defaults into `given` (an object of parameter -> value) and checks names, types, ranges and
/// choices; throws ConfigError naming method, parameter and expectation.
nlohmann::json resolve_params(const MethodInfo& m, const nlohmann::json& given);

const char* param_type_name(ParamType t);

}  // namespace retro
