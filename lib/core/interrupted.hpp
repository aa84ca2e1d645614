#pragma once
// The error thrown when work is stopped on request (SIGINT/SIGTERM, seen through a stop flag or callback)
// before it produced anything; whatever it was writing has been removed. The CLI maps it to the
// signal's exit code (128 + signal), not to the bad-input code 2.
#include "core/error.hpp"

namespace retro {

class Interrupted : public Error {
  public:
    using Error::Error;
};

}  // namespace retro
