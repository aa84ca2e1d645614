#pragma once
// Hardware profiles (configs/hardware/<name>.json): the numbers the cost model (system/cost_model.hpp)
// turns bytes and work into time with. Every field in the file is {"value": x, "source": "..."}.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "system/hardware_spec.hpp"

namespace retro {

/// A profile file: the numbers (HardwareSpec, system/hardware_spec.hpp) with their sources.
struct HardwareProfile : HardwareSpec {
    std::string description;
    nlohmann::json sources;           ///< field -> source text, as in the file

    /// Parses a profile; every numeric field is required as {"value", "source"} with a non-empty
    /// source and a positive value. `origin` prefixes error messages (ConfigError).
    static HardwareProfile from_json(const nlohmann::json& j, const std::string& origin);
    nlohmann::json to_json() const;  ///< name, description and every value (sources included)
};

/// Directories searched for <name>.json: $RETRO_HARDWARE_DIR, ./configs/hardware, and the source
/// tree's configs/hardware.
std::vector<std::string> hardware_search_dirs();

/// Loads the profile `name` (a file name without .json, or a path to a .json file). Throws
/// ConfigError naming the profile and the directories searched when it is absent.
HardwareProfile load_hardware_profile(const std::string& name);

/// Profile names found in the search directories, sorted, unique.
std::vector<std::string> list_hardware_profiles();

}  // namespace retro
