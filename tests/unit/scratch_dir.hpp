#pragma once
// A temporary directory for a test, removed with everything in it when the test ends.
#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace retro::test {

struct ScratchDir {
    std::string path;
    ScratchDir() {
        char tmpl[] = "/tmp/retro_test_XXXXXX";
        const char* p = mkdtemp(tmpl);
        if (!p) throw std::runtime_error("mkdtemp failed");
        path = p;
    }
    ~ScratchDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
};

}  // namespace retro::test
