#include "analysis/head_selection.hpp"

#include <sstream>
#include <stdexcept>

#include "core/error.hpp"

namespace retro {

std::vector<int> parse_int_list(const std::string& s, const char* option) {
    std::vector<int> v;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        try {
            size_t pos = 0;
            const int x = std::stoi(item, &pos);
            if (pos != item.size()) throw std::invalid_argument(item);
            v.push_back(x);
        } catch (const std::exception&) {
            throw ConfigError(std::string("--") + option + ": '" + item + "' is not an integer");
        }
    }
    return v;
}

std::string join_ints(const std::vector<int>& v) {
    std::string s;
    for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
    return s;
}

HeadSelection select_heads(const TraceReader& reader, const std::string& path, const std::string& layers,
                           const std::string& kv_heads) {
    const TraceInfo& info = reader.info();
    HeadSelection sel;
    sel.layers = layers.empty() ? info.layers : parse_int_list(layers, "layers");
    for (int l : sel.layers)
        if (!reader.has_layer(l))
            throw ConfigError("--layers: layer " + std::to_string(l) + " is not in " + path + " (layers " +
                              join_ints(info.layers) + ")");
    if (kv_heads.empty())
        for (int k = 0; k < info.num_kv_heads; ++k) sel.kv_heads.push_back(k);
    else
        sel.kv_heads = parse_int_list(kv_heads, "kv-heads");
    for (int k : sel.kv_heads)
        if (k < 0 || k >= info.num_kv_heads)
            throw ConfigError("--kv-heads: kv head " + std::to_string(k) + " is out of range 0.." +
                              std::to_string(info.num_kv_heads - 1));
    return sel;
}

}  // namespace retro
