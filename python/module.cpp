// The retro_bench package's compiled core, retro_bench._core: the C++ core (method registry, trace reader, methods, the evaluator's
// attention of a selection) with NumPy arrays in and out. docs/python.md documents the API.
#include "bindings.hpp"
#include "py_methods.hpp"

PYBIND11_MODULE(_core, m) {  // retro_bench._core: the package (python/retro_bench/__init__.py) exposes its names
    m.doc() = "retro-bench: sparse KV-cache attention methods and traces (docs/python.md)";
    m.attr("__version__") = RETRO_VERSION;
    retro::pyb::bind_errors(m);
    retro::pyb::bind_registry(m);
    retro::pyb::bind_trace(m);
    retro::pyb::bind_attention(m);
    retro::pyb::bind_head_method(m);
    retro::pyb::bind_threads(m);
    // "py:FILE:Class" methods run in this interpreter (HeadMethod, the closed loop): nothing to start
    retro::pym::install_python_methods({});
}
