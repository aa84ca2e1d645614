#pragma once
// The pieces of the retro_bench Python module (docs/python.md), one file each; module.cpp calls them.
#include <pybind11/pybind11.h>

namespace retro::pyb {

namespace py = pybind11;

void bind_errors(py::module_& m);        ///< C++ typed errors -> Python exceptions (errors.cpp)
void bind_registry(py::module_& m);      ///< methods(), resolve_params() (bind_registry.cpp)
void bind_trace(py::module_& m);         ///< Trace (bind_trace.cpp)
void bind_attention(py::module_& m);     ///< full_attention() (bind_attention.cpp)
void bind_head_method(py::module_& m);   ///< HeadMethod (bind_head_method.cpp)
void bind_threads(py::module_& m);       ///< set_threads(), get_threads() (bind_threads.cpp)

}  // namespace retro::pyb
