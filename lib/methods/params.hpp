#pragma once
// Method parameters as data: each method declares its parameters (type, default, range or choices,
// description, source) so configs can be validated before any work starts and list-methods can show
// them. Values travel as JSON objects holding every parameter (defaults filled in).
#include <deque>
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
    /// Search-time: build() never reads it, so points that differ only in such parameters can share
    /// one built index (Method::clone_built; the closed loop builds once per case and budget group),
    /// and the per-head seed ignores it (bench/head_run method_seed). ann-benchmarks' "query args".
    bool search = false;
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
    /// What identifies the code of a method defined outside this binary (a Python method:
    /// {"file", "sha256"} of its source file, python/methods/). It enters the run id and is recorded in
    /// the part files and run records, so an edited file is a different method and --resume never mixes
    /// the two. Null for compiled methods (their run ids are unchanged).
    nlohmann::json source;
};

/// Every registered method, in display order: the built-in list of lib/methods/registry.cpp, then any
/// added by register_method (a deque: references stay valid when a method is registered later).
const std::deque<MethodInfo>& method_registry();

/// Adds a method defined outside the library (a test, an experiment's own code) to the registry, so
/// configs, `run_config` and find_method see it like a built-in one; its check gets the shared budget
/// check. Register before parsing configs or starting runs (registration is not thread-safe against
/// concurrent lookups). Throws ConfigError when `m` has no name or no
/// make function, or when a method of that name is already registered.
void register_method(MethodInfo m);

/// Registers a method the registry does not hold yet from its name alone ("py:FILE.py:Class":
/// python/methods/py_resolver.hpp) and returns true, or returns false when `name` is not its kind.
/// Throws ConfigError for a name of its kind that cannot be loaded (missing file, bad declarations).
using MethodResolver = std::function<bool(const std::string& name)>;

/// Installs the resolver find_method asks about unknown names (one per process; an empty function
/// removes it). Programs that can run Python methods install one before parsing configs.
void set_method_resolver(MethodResolver r);

/// The method named `name`; throws ConfigError listing the known methods. An unknown name goes to the
/// resolver first, when one is installed (registration happens then: call it before starting runs).
const MethodInfo& find_method(const std::string& name);

/// Fills defaults into `given` (an object of parameter -> value) and checks names, types, ranges and
/// choices; throws ConfigError naming method, parameter and expectation.
nlohmann::json resolve_params(const MethodInfo& m, const nlohmann::json& given);

const char* param_type_name(ParamType t);

/// Marks the named parameters of `m` search-time (ParamSpec::search). Throws std::logic_error for a
/// name `m` does not declare (a registry entry's own mistake).
void mark_search_params(MethodInfo& m, const std::vector<std::string>& names);

/// `params` (resolved) without the method's search-time parameters: what a build depends on. Points
/// with equal build_params share a build.
nlohmann::json build_params(const MethodInfo& m, const nlohmann::json& params);

}  // namespace retro
