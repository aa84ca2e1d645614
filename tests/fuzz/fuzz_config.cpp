// libFuzzer target: the run-config parser (parse_config with the method registry) on mutated JSON
// (seeds: tests/fuzz/corpus/config, the repository's own configs). Bad configs must raise retro::Error
// (or be rejected as invalid JSON); anything else (a crash, a sanitizer finding, another exception such
// as nlohmann::json's type_error escaping the parser) is a bug.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/config.hpp"
#include "core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const nlohmann::json j =
        nlohmann::json::parse(std::string((const char*)data, size), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return 0;  // not JSON: load_config reports that before parse_config runs
    try {
        const retro::RunConfig c = retro::parse_config(j, "fuzz.json");
        (void)c.resolved().dump();  // the manifest's copy of the config must serialize
        for (const auto& r : c.runs) (void)r.label();
    } catch (const retro::Error&) {
        // a clear error naming the key and what was expected: the expected outcome for a bad config
    }
    return 0;
}
