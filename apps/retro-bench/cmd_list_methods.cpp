// `retro-bench list-methods`: every method with its parameters, defaults, ranges and sources.
#include <fmt/format.h>

#include <cmath>

#include "commands.hpp"
#include "methods/params.hpp"

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
    return std::function<int()>([json_out] {
        if (*json_out) {
            nlohmann::json j = nlohmann::json::array();
            for (const auto& m : method_registry()) {
                nlohmann::json ps = nlohmann::json::array();
                for (const auto& s : m.params)
                    ps.push_back({{"name", s.name}, {"type", param_type_name(s.type)}, {"default", s.default_value},
                                  {"range", range_text(s)}, {"description", s.description}, {"source", s.source}});
                j.push_back({{"name", m.name}, {"description", m.description}, {"paper", m.paper}, {"params", ps}});
            }
            fmt::print("{}\n", j.dump(2));
            return 0;
        }
        for (const auto& m : method_registry()) {
            fmt::print("{}\n  {}\n", m.name, m.description);
            if (m.paper != "-") fmt::print("  paper: {}\n", m.paper);
            for (const auto& s : m.params)
                fmt::print("    {:<19} {:<7} default {:<9} {:<17} {}  [source: {}]\n", s.name,
                           param_type_name(s.type),
                           s.default_value.is_string() ? s.default_value.get<std::string>() : s.default_value.dump(),
                           range_text(s), s.description, s.source);
            if (m.params.empty()) fmt::print("    (no parameters)\n");
            fmt::print("\n");
        }
        return 0;
    });
});

}  // namespace
}  // namespace retro::cli
