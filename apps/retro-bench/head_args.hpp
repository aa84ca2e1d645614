#pragma once
// Command-line head selection shared by the subcommands that read a trace directly (inspect,
// ood-recall): "--layers 0,5" / "--kv-heads 1,3" lists, checked against the trace before any work.
#include <string>
#include <vector>

#include "trace/reader.hpp"

namespace retro::cli {

/// "1,2,3" -> {1, 2, 3}; an item that is not an integer is a ConfigError naming `--option`.
std::vector<int> parse_int_list(const std::string& s, const char* option);

/// {1, 2, 3} -> "1,2,3".
std::string join_ints(const std::vector<int>& v);

struct HeadSelection {
    std::vector<int> layers;    ///< layer indices present in the trace
    std::vector<int> kv_heads;  ///< KV heads in [0, num_kv_heads)
};

/// Layers and KV heads from --layers / --kv-heads (empty = all), each checked against the trace:
/// a layer the file does not hold or a KV head out of range is a ConfigError naming the option.
HeadSelection select_heads(const TraceReader& reader, const std::string& path, const std::string& layers,
                           const std::string& kv_heads);

}  // namespace retro::cli
