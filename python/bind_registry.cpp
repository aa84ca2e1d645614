// The method registry as `retro-bench list-methods --json` shows it, and parameter resolution.
#include <cmath>

#include <pybind11/stl.h>

#include "bindings.hpp"
#include "json_py.hpp"
#include "methods/params.hpp"

namespace retro::pyb {
namespace {

py::object bound(double x) { return std::isinf(x) ? py::object(py::none()) : py::object(py::float_(x)); }

py::dict param_dict(const ParamSpec& s) {
    py::dict d;
    d["name"] = s.name;
    d["type"] = param_type_name(s.type);
    d["default"] = from_json(s.default_value);
    d["min"] = bound(s.min);
    d["max"] = bound(s.max);
    d["choices"] = py::cast(s.choices);
    d["description"] = s.description;
    d["source"] = s.source;
    d["search"] = s.search;
    return d;
}

}  // namespace

void bind_registry(py::module_& m) {
    m.def(
        "methods",
        [] {
            py::list out;
            for (const MethodInfo& info : method_registry()) {
                py::dict d;
                d["name"] = info.name;
                d["description"] = info.description;
                d["paper"] = info.paper;
                py::list ps;
                for (const ParamSpec& s : info.params) ps.append(param_dict(s));
                d["params"] = ps;
                if (!info.source.is_null()) d["source"] = from_json(info.source);  // a Python method's file, sha256
                out.append(d);
            }
            return out;
        },
        "Every registered method in display order: list of dicts {name, description, paper, params: [{name, "
        "type ('int'|'number'|'bool'|'string'), default, min, max (None = unbounded), choices, description, "
        "source, search (search-time: build() never reads it, HeadMethod.clone shares a build across it)}]}, as `retro-bench list-methods`; a loaded Python method (\"py:FILE:Class\") also has "
        "source: {file, sha256}.");
    m.def(
        "resolve_params",
        [](const std::string& method, const py::object& params) {
            const nlohmann::json given = to_json(params, "params of method '" + method + "'");
            return from_json(resolve_params(find_method(method), given));
        },
        py::arg("method"), py::arg("params") = py::none(),
        "Parameters of `method` with defaults filled in, checked (names, types, ranges, choices, cross-parameter "
        "rules). Raises ConfigError (a ValueError) naming the method and the parameter.");
}

}  // namespace retro::pyb
