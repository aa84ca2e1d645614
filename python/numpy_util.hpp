#pragma once
// NumPy arrays in and out of the binding: inputs are checked (real dtype, shape, finite values) and
// converted to C-contiguous float32 only when they are not already; outputs hand a std::vector's buffer
// to NumPy without a copy.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

namespace retro::pyb {

namespace py = pybind11;
using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

/// `obj` as a C-contiguous float32 array (no copy when it already is one). Throws TypeError naming
/// `what` for a non-array or a dtype that is not a real number (complex, object, strings).
F32Array as_f32(const py::handle& obj, const std::string& what);

/// Throws ValueError naming `what` unless a has ndim = shape.size() and every shape[i] >= 0 matches
/// (-1 = any). `dims` names the axes for the message, e.g. "[n, head_dim=64]".
void check_shape(const F32Array& a, const std::vector<py::ssize_t>& shape, const std::string& what,
                 const std::string& dims);

/// Throws ValueError naming `what` and the first flat index of a NaN or Inf in a.
void check_finite(const F32Array& a, const std::string& what);

/// A NumPy array of `shape` that owns v's buffer (moved, not copied).
template <class T>
py::array_t<T> to_numpy(std::vector<T>&& v, std::vector<py::ssize_t> shape) {
    auto* owned = new std::vector<T>(std::move(v));
    py::capsule owner(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
    return py::array_t<T>(std::move(shape), owned->data(), owner);
}

/// "(2, 3)" for error messages.
std::string shape_text(const py::array& a);

}  // namespace retro::pyb
