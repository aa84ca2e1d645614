#pragma once
// The message of the retro::Error that `f` throws, or "" when it throws none: for tests that check what
// an error says.
#include <functional>
#include <string>

#include "core/error.hpp"

namespace retro::test {

inline std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace retro::test
