// retro::Error and its typed children become Python exceptions carrying the C++ message. Bad input
// (config, parameter, trace) is a ValueError; anything else the library throws is a RuntimeError.
#include "bindings.hpp"
#include "core/error.hpp"

namespace retro::pyb {

void bind_errors(py::module_& m) {
    // pybind11 tries translators newest first: the base class is registered before its children.
    py::register_exception<retro::Error>(m, "Error", PyExc_RuntimeError);
    py::register_exception<retro::ConfigError>(m, "ConfigError", PyExc_ValueError);
    py::register_exception<retro::ParamError>(m, "ParamError", PyExc_ValueError);
    py::register_exception<retro::TraceError>(m, "TraceError", PyExc_ValueError);
}

}  // namespace retro::pyb
