#pragma once
// Small filesystem helpers: atomic writes (temp file + rename) so no reader ever sees a half-written
// result, and whole-file reads.
#include <string>

namespace retro {

/// Writes `content` to `path` atomically: writes "<path>.tmp-<host>-<pid>-<n>" (core/temp_files.hpp), fsyncs, renames over `path`.
/// Creates missing parent directories. Throws Error on failure (naming the path).
void write_file_atomic(const std::string& path, const std::string& content);

/// Reads a whole file; throws Error naming the path if it cannot be read.
std::string read_file(const std::string& path);

bool file_exists(const std::string& path);

}  // namespace retro
