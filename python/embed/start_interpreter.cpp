// retro-bench's embedded interpreter for Python methods (python/methods/): started the first time a
// "py:" method is named (a run without one never loads Python), never finalized (method classes live as
// long as the process). The GIL is released right away: methods take it per call, from whichever
// runner worker calls them.
#include <pybind11/embed.h>

#include <mutex>

#include "py_methods.hpp"
#include "start_interpreter.hpp"

namespace retro::pym {

void install_embedded_python_methods(std::function<std::string()> package_dir) {
    install_python_methods([package_dir = std::move(package_dir)] {
        static std::once_flag once;
        std::call_once(once, [&] {
            if (Py_IsInitialized()) return;
            // no Python signal handlers: retro-bench's own SIGINT/SIGTERM handling stays in charge
            pybind11::initialize_interpreter(false);
            if (const std::string dir = package_dir ? package_dir() : std::string(); !dir.empty())
                pybind11::module_::import("site").attr("addsitedir")(
                    pybind11::module_::import("os.path").attr("dirname")(dir));
            new pybind11::gil_scoped_release();  // released for good (never destroyed)
        });
    });
}

}  // namespace retro::pym
