#include "system/hardware.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "core/error.hpp"
#include "core/fs.hpp"
#include "core/host.hpp"
#include "core/json_file.hpp"

namespace retro {

using json = nlohmann::json;
namespace fs = std::filesystem;


HardwareProfile HardwareProfile::from_json(const json& j, const std::string& origin) {
    if (!j.is_object()) throw ConfigError(origin + ": expected a JSON object");
    std::set<std::string> allowed = {"name", "description"};
    for (const auto& f : hardware_fields()) allowed.insert(f);
    for (auto it = j.begin(); it != j.end(); ++it)
        if (!allowed.count(it.key())) throw ConfigError(origin + ": unknown key '" + it.key() + "'");
    HardwareProfile p;
    if (!j.contains("name") || !j["name"].is_string()) throw ConfigError(origin + ": missing \"name\"");
    p.name = j["name"].get<std::string>();
    if (j.contains("description")) p.description = j["description"].get<std::string>();
    p.sources = json::object();
    for (const std::string& f : hardware_fields()) {
        const std::string w = origin + ": " + f;
        if (!j.contains(f)) throw ConfigError(w + ": missing (expected {\"value\", \"source\"})");
        const json& v = j[f];
        if (!v.is_object() || !v.contains("value") || !v["value"].is_number() || !v.contains("source") ||
            !v["source"].is_string() || v["source"].get<std::string>().empty())
            throw ConfigError(w + ": expected {\"value\": number, \"source\": non-empty string}");
        const double x = v["value"].get<double>();
        if (!(x > 0)) throw ConfigError(w + " = " + v["value"].dump() + ": expected a positive value");
        if (f.find("efficiency") != std::string::npos && x > 1)
            throw ConfigError(w + " = " + v["value"].dump() + ": an efficiency is a fraction in (0, 1]");
        *hardware_field(p, f) = x;
        p.sources[f] = v["source"];
    }
    if (p.gpu_memory_reserved_GiB >= p.gpu_memory_GiB)
        throw ConfigError(origin + ": gpu_memory_reserved_GiB must be below gpu_memory_GiB");
    return p;
}

json HardwareProfile::to_json() const {
    json j = {{"name", name}, {"description", description}};
    for (const std::string& f : hardware_fields())
        j[f] = {{"value", hardware_field(*this, f)}, {"source", sources.value(f, std::string())}};
    return j;
}

std::vector<std::string> hardware_search_dirs() {
    std::vector<std::string> d;
    if (const char* e = std::getenv("RETRO_HARDWARE_DIR"); e && *e) d.push_back(e);
    d.push_back("configs/hardware");
    d.push_back(std::string(source_dir()) + "/configs/hardware");
    return d;
}

HardwareProfile load_hardware_profile(const std::string& name) {
    std::string path;
    if (name.size() > 5 && name.substr(name.size() - 5) == ".json") {
        path = name;
    } else {
        for (const auto& dir : hardware_search_dirs())
            if (file_exists(dir + "/" + name + ".json")) {
                path = dir + "/" + name + ".json";
                break;
            }
    }
    if (path.empty() || !file_exists(path)) {
        std::string dirs;
        for (const auto& dir : hardware_search_dirs()) dirs += (dirs.empty() ? "" : ", ") + dir;
        std::string known;
        for (const auto& n : list_hardware_profiles()) known += (known.empty() ? "" : ", ") + n;
        throw ConfigError("hardware profile '" + name + "' not found (searched " + dirs + "; known: " +
                          (known.empty() ? "none" : known) + ")");
    }
    return HardwareProfile::from_json(read_json_file(path, "hardware profile"), path);
}

std::vector<std::string> list_hardware_profiles() {
    std::set<std::string> names;
    for (const auto& dir : hardware_search_dirs()) {
        std::error_code ec;
        if (!fs::is_directory(dir, ec)) continue;
        for (const auto& e : fs::directory_iterator(dir, ec))
            if (e.path().extension() == ".json") names.insert(e.path().stem().string());
    }
    return {names.begin(), names.end()};
}

}  // namespace retro
