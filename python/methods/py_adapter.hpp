#pragma once
// The adapter: a retro::Method whose build/append/select/footprint call a Python object's methods with
// NumPy views of the harness's buffers. Every call takes the GIL (py::gil_scoped_acquire), so the
// runner's worker threads may call Python methods of different heads concurrently: their Python code
// runs one at a time, the harness's evaluation around it stays parallel.
#include <pybind11/pybind11.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "methods/method.hpp"

namespace retro::pym {

namespace py = pybind11;

/// A loaded method class. Never freed: the class object is kept for the life of the process (the
/// interpreter is never finalized while methods may run), so nothing here touches Python at exit.
struct PyMethodClass {
    std::string name;       ///< "py:FILE:Class", as configs spell it
    std::string file;       ///< FILE
    std::string cls_name;   ///< Class
    py::handle cls;         ///< the class (one reference owned, never released)
    /// types.SimpleNamespace, looked up once at load (a function-local static would be initialized
    /// under the GIL by several threads: a deadlock when Python switches threads inside the import)
    py::handle namespace_type;
    bool has_append = false;
    bool has_footprint = false;
};

/// A Python method instance with resolved `params` (the instance is created in build, which knows the
/// layer and head that errors name).
std::unique_ptr<Method> make_py_method(const PyMethodClass& c, const nlohmann::json& params);

}  // namespace retro::pym
