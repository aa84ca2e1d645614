// retro::Error and its typed children become Python exceptions carrying the C++ message. Bad input
// (config, parameter, trace) is a ValueError; anything else the library throws is a RuntimeError.
#include "bindings.hpp"
#include "core/error.hpp"
#include "core/interrupted.hpp"

namespace retro::pyb {

void bind_errors(py::module_& m) {
    // pybind11 tries translators newest first: the base class is registered before its children.
    py::register_exception<retro::Error>(m, "Error", PyExc_RuntimeError);
    py::register_exception<retro::ConfigError>(m, "ConfigError", PyExc_ValueError);
    py::register_exception<retro::ParamError>(m, "ParamError", PyExc_ValueError);
    py::register_exception<retro::TraceError>(m, "TraceError", PyExc_ValueError);
    // a stop request that reached a Python method mid-call (python/methods/py_interrupt.hpp; the closed
    // loop's Ctrl-C raised inside the method): Python's own KeyboardInterrupt, so the caller stops as after
    // Ctrl-C anywhere else
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const retro::Interrupted& e) {
            PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
        }
    });
}

}  // namespace retro::pyb
