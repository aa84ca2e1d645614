// `retro-bench list-methods`: every method with its parameters, defaults, ranges and sources.
#include <fmt/format.h>

#include <cmath>

#include "commands.hpp"
#include "core/error.hpp"
#include "methods/params.hpp"
#ifdef RETRO_HAVE_PYTHON_METHODS
#include "py_methods.hpp"
#endif

namespace retro::cli {
namespace {

std::string range_text(const ParamSpec& s) {
    if (!s.choices.empty()) {
        std::string c;
        for (const auto& x : s.choices) c += (c.empty() ? "" : "|") + x;
        return c;
    }
    if (s.type == ParamType::boolean || s.type == ParamType::string) return "";
    auto n = [](double x) { return std::isinf(x) ? std::string(x < 0 ? "-inf" : "inf") : fmt::format("{:g}", x); };
    return "[" + n(s.min) + ", " + n(s.max) + "]";
}

const CommandRegistrar reg(50, [](CLI::App& app) {
    auto* sub = app.add_subcommand("list-methods", "List methods with their parameters and defaults");
    auto json_out = std::make_shared<bool>(false);
    sub->add_flag("--json", *json_out, "print as JSON");
    auto py_files = std::make_shared<std::vector<std::string>>();
    sub->add_option("--py", *py_files,
                    "list the Python methods of FILE instead (each as py:FILE:Class, the name configs use)");
    return std::function<int()>([json_out, py_files] {
        std::vector<const MethodInfo*> shown;
        if (py_files->empty())
            for (const auto& m : method_registry()) shown.push_back(&m);
#ifdef RETRO_HAVE_PYTHON_METHODS
        for (const auto& f : *py_files)
            for (const auto& name : pym::register_python_methods_in(f)) shown.push_back(&find_method(name));
#else
        if (!py_files->empty())
            throw ConfigError("--py: this retro-bench was built without Python methods (libpython not found at "
                              "configure time; Debian: python3-dev)");
#endif
        if (*json_out) {
            nlohmann::json j = nlohmann::json::array();
            for (const MethodInfo* mp : shown) {
                const MethodInfo& m = *mp;
                nlohmann::json ps = nlohmann::json::array();
                for (const auto& s : m.params)
                    ps.push_back({{"name", s.name}, {"type", param_type_name(s.type)}, {"default", s.default_value},
                                  {"range", range_text(s)}, {"description", s.description}, {"source", s.source},
                                  {"search", s.search}});
                j.push_back({{"name", m.name}, {"description", m.description}, {"paper", m.paper}, {"params", ps}});
                if (!m.source.is_null()) j.back()["source"] = m.source;
            }
            fmt::print("{}\n", j.dump(2));
            return 0;
        }
        for (const MethodInfo* mp : shown) {
            const MethodInfo& m = *mp;
            fmt::print("{}\n  {}\n", m.name, m.description);
            if (!m.source.is_null())
                fmt::print("  file: {} (sha256 {})\n", m.source["file"].get<std::string>(),
                           m.source["sha256"].get<std::string>().substr(0, 16));
            if (m.paper != "-") fmt::print("  paper: {}\n", m.paper);
            for (const auto& s : m.params)
                fmt::print("    {:<19} {:<7} default {:<9} {:<17} {}{}  [source: {}]\n", s.name,
                           param_type_name(s.type),
                           s.default_value.is_string() ? s.default_value.get<std::string>() : s.default_value.dump(),
                           range_text(s), s.description,
                           s.search ? " (search-time: points differing only here share a build)" : "", s.source);
            if (m.params.empty()) fmt::print("    (no parameters)\n");
            fmt::print("\n");
        }
        return 0;
    });
});

}  // namespace
}  // namespace retro::cli
