#pragma once
// Temporary files of atomic writers (results, traces): their names record who made them, so a cleaner
// removes only its own leftovers or those of a writer that is gone, never another live writer's file in
// flight (several runs or shards may write into one directory; docs/results.md).
//
// Name: "<final path>.tmp-<host>-<pid>-<n>" (host may contain '-': the last two fields are pid and n).
// Older names "<final path>.tmp-<pid>[-<n>]" carry no host and are read as made on this host.
#include <optional>
#include <string>

namespace retro {

/// This machine's host name (gethostname), "unknown" if it has none.
std::string this_host();

/// A fresh temporary name next to `path`: "<path>.tmp-<host>-<pid>-<n>", unique within this process.
std::string temp_path_for(const std::string& path);

/// Who made a temporary file, parsed from its file name.
struct TempOwner {
    std::string host;  ///< host name; this_host() for old names without one
    long pid = 0;
};
/// The owner of a temporary file name (a file name or a path), or nullopt when it is not one.
std::optional<TempOwner> temp_file_owner(const std::string& name);

/// True when the process that made a temp file is certainly gone: it ran on this host and no process
/// with its PID exists. A writer on another host is never judged gone here (its liveness is unknown).
bool temp_owner_gone(const TempOwner& owner);

/// True when the temp file was made by this process.
bool temp_owner_is_me(const TempOwner& owner);

/// Removes the temporary files of `path` ("<path>.tmp-*" in its directory) whose owner is gone
/// (temp_owner_gone). Returns how many were removed. For writers of one file (synth's trace).
int remove_orphan_temps_of(const std::string& path);

}  // namespace retro
