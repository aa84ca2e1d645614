#include "core/json_keys.hpp"

#include "core/error.hpp"

namespace retro {

void check_keys(const nlohmann::json& j, const std::set<std::string>& allowed, const std::string& where) {
    for (auto it = j.begin(); it != j.end(); ++it) {
        if (!allowed.count(it.key())) {
            std::string known;
            for (const auto& k : allowed) known += (known.empty() ? "" : ", ") + k;
            throw ConfigError(where + ": unknown key '" + it.key() + "' (allowed: " + known + ")");
        }
    }
}

}  // namespace retro
