#pragma once
// Strict JSON for files a person writes (run configs, hardware profiles): a key given twice in one object
// is an error (nlohmann keeps the last silently), and every error names the file and the key path where
// it occurred ("methods[1].params.k"), including numbers out of a double's range (1e400).
#include <nlohmann/json.hpp>
#include <string>

namespace retro {

/// Parses `text`; `origin` (a file name) prefixes every message. Throws ConfigError on a syntax error,
/// a duplicate key or a number out of range.
nlohmann::json parse_json_strict(const std::string& text, const std::string& origin);

/// Reads and parses the file `path` with parse_json_strict. Throws ConfigError "<what> not found: path",
/// "path: is a directory, expected a <what>" or the parse error.
nlohmann::json read_json_file(const std::string& path, const std::string& what = "config file");

}  // namespace retro
