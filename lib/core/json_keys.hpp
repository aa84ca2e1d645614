#pragma once
// Config objects reject keys they do not know, naming the key and every allowed one.
#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace retro {

/// Throws ConfigError "<where>: unknown key 'k' (allowed: a, b, c)" for the first key of the object `j`
/// not in `allowed` (listed sorted).
void check_keys(const nlohmann::json& j, const std::set<std::string>& allowed, const std::string& where);

}  // namespace retro
