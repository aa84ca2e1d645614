#pragma once
// Subcommand registration. Each cmd_<name>.cpp defines one static CommandRegistrar that adds its
// subcommand to the CLI11 app; main() builds the app from every registrar. Callbacks may throw
// retro::Error (printed as "retro-bench: error: ..." with exit code 2) or return a nonzero exit code.
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace retro::cli {

/// Adds a subcommand to `app`; the returned function runs it after parsing and returns the exit code.
using CommandSetup = std::function<std::function<int()>(CLI::App& app)>;

struct CommandRegistrar {
    CommandRegistrar(int order, CommandSetup setup);
};

struct RegisteredCommand {
    int order;
    CommandSetup setup;
};
std::vector<RegisteredCommand>& command_registry();

/// True when stderr is a terminal (progress bars redraw in place; otherwise plain lines).
bool stderr_is_tty();

}  // namespace retro::cli
