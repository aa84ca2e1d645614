// retro-bench: replay attention traces through KV-cache retrieval methods. See README.md.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>

#include "commands.hpp"
#include "hdf5_crash_guard.hpp"
#include "hdf5_watchdog.hpp"
#include "core/child_process.hpp"
#include "core/host.hpp"
#include "core/error.hpp"
#ifdef RETRO_HAVE_PYTHON_METHODS
#include "spawn.hpp"
#include "start_interpreter.hpp"
#endif

namespace retro::cli {

std::vector<RegisteredCommand>& command_registry() {
    static std::vector<RegisteredCommand> r;
    return r;
}

CommandRegistrar::CommandRegistrar(int order, CommandSetup setup) {
    command_registry().push_back({order, std::move(setup)});
}

bool stderr_is_tty() { return isatty(STDERR_FILENO) != 0; }

}  // namespace retro::cli

int main(int argc, char** argv) {
    using namespace retro::cli;
    // started by a retro-bench or closed loop that may be killed: end with it (core/child_process.hpp)
    retro::die_with_parent_from_env();
    CLI::App app{"retro-bench: replay dumped attention traces through sparse KV-cache retrieval methods "
                 "and report recall, attention-output error, PCIe traffic and latency"};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string(RETRO_VERSION) + " (" + retro::git_revision() + ")");
#ifdef RETRO_HAVE_PYTHON_METHODS
    // "py:FILE:Class" methods; Python starts on first use, with the retro_bench package (Method) importable
    retro::pym::install_embedded_python_methods([] {
        try {
            return python_package_dir();
        } catch (const retro::Error&) {
            return std::string();  // methods without `import retro_bench` still run
        }
    });
#endif
    auto& reg = command_registry();
    std::sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.order < b.order; });
    std::vector<std::pair<CLI::App*, std::function<int()>>> runners;
    for (auto& c : reg) {
        size_t before = app.get_subcommands({}).size();
        auto run = c.setup(app);
        auto subs = app.get_subcommands({});
        if (subs.size() > before) runners.emplace_back(subs.back(), std::move(run));
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    // a crash inside HDF5 reading a trace's metadata ends with exit 2 naming the file (after the
    // sanitizer run-time's handlers, installed before main, which stay the fallback for any other crash)
    install_hdf5_crash_guard();
    try {
        const Hdf5Watchdog watchdog;  // a trace whose metadata HDF5 never finishes reading ends with exit 2
        for (auto& [sub, run] : runners)
            if (sub->parsed()) return run();
    } catch (const retro::Error& e) {
        std::fprintf(stderr, "retro-bench: error: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "retro-bench: internal error: %s\n", e.what());
        return 3;
    }
    return 0;
}
