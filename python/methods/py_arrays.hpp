#pragma once
// The harness's float buffers handed to a Python method as read-only NumPy views (no copy: a Python
// method sees the prompt of a 128K-token head without an O(n d) copy per call), and the check that the
// method let go of them when its call returned: the buffers belong to the runner and change or go away
// after the call, so a kept view would read stale memory later. A method keeps a copy instead.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

namespace retro::pym {

namespace py = pybind11;

/// A read-only float32 view of `p` with C-contiguous `shape` (e.g. keys: [n, d]). Hold the GIL.
py::array readonly_view(const float* p, std::vector<py::ssize_t> shape);

/// Empty when nothing but the caller holds `obj` (refcount 1), else the message that names `what`
/// (e.g. "kv.keys") and says to keep a copy. Hold the GIL.
std::string kept_reference(const py::handle& obj, const std::string& what);

}  // namespace retro::pym
