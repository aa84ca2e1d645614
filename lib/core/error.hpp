#pragma once
// Typed errors. The library never prints and never exits: it throws one of these with enough context
// (file, dataset, parameter, expectation) for the CLI to print a one-line diagnosis.
#include <stdexcept>
#include <string>

namespace retro {

/// Base of every error retro-bench throws on bad input.
class Error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

/// A trace file is missing, truncated, malformed or inconsistent. The message names the file, the
/// dataset or attribute, and what was expected.
class TraceError : public Error {
  public:
    using Error::Error;
};

/// A run configuration is malformed: unknown key, wrong type, unknown method, bad value.
class ConfigError : public Error {
  public:
    using Error::Error;
};

/// A method parameter is out of its valid range or inconsistent with the data it is applied to.
class ParamError : public Error {
  public:
    using Error::Error;
};

}  // namespace retro
