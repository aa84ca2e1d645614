#include "core/json_file.hpp"

#include <filesystem>
#include <set>
#include <vector>

#include "core/error.hpp"
#include "core/fs.hpp"

namespace retro {

using json = nlohmann::json;

namespace {

/// Where the parser is: one frame per open object or array.
struct Frame {
    bool array = false;
    long index = 0;            ///< array: the element being parsed
    std::string key;           ///< object: the key whose value is being parsed
    std::set<std::string> keys;  ///< object: keys seen so far
};

std::string path_of(const std::vector<Frame>& frames) {
    std::string p;
    for (const Frame& f : frames) {
        if (f.array) p += "[" + std::to_string(f.index) + "]";
        else if (!f.key.empty()) p += (p.empty() ? "" : ".") + f.key;
    }
    return p;
}

/// Thrown by the parse callback at a duplicate key to stop the parse; caught below.
struct DuplicateKey {
    std::string path;
};

}  // namespace

json parse_json_strict(const std::string& text, const std::string& origin) {
    std::vector<Frame> frames;
    const auto child_done = [&] {
        if (!frames.empty() && frames.back().array) ++frames.back().index;
    };
    const json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) {
        switch (ev) {
            case json::parse_event_t::object_start: frames.emplace_back(); break;
            case json::parse_event_t::array_start:
                frames.emplace_back();
                frames.back().array = true;
                break;
            case json::parse_event_t::key: {
                Frame& f = frames.back();
                f.key = parsed.get<std::string>();
                if (!f.keys.insert(f.key).second) throw DuplicateKey{path_of(frames)};
                break;
            }
            case json::parse_event_t::object_end:
            case json::parse_event_t::array_end:
                frames.pop_back();
                child_done();
                break;
            case json::parse_event_t::value: child_done(); break;
        }
        return true;
    };
    try {
        return json::parse(text, cb);
    } catch (const DuplicateKey& d) {
        throw ConfigError(origin + ": key " + d.path + " is given twice (a JSON object's keys must be unique)");
    } catch (const json::out_of_range& e) {  // 406: a number beyond a double's range
        const std::string at = path_of(frames);
        throw ConfigError(origin + ": " + (at.empty() ? std::string("a number") : at) +
                          ": number out of range (beyond a double: +-1.8e308): " + e.what());
    } catch (const json::exception& e) {
        const std::string at = path_of(frames);
        throw ConfigError(origin + ": invalid JSON" + (at.empty() ? std::string() : " at " + at) + ": " + e.what());
    }
}

json read_json_file(const std::string& path, const std::string& what) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw ConfigError(path + ": is a directory, expected a " + what);
    if (!file_exists(path)) throw ConfigError(what + " not found: " + path);
    return parse_json_strict(read_file(path), path);
}

}  // namespace retro
