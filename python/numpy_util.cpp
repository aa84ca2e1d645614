#include "numpy_util.hpp"

#include <cmath>

namespace retro::pyb {

F32Array as_f32(const py::handle& obj, const std::string& what) {
    if (obj.is_none()) throw py::type_error(what + ": expected a float32 array, got None");
    py::array a;
    try {
        a = py::array::ensure(obj);
    } catch (const py::error_already_set&) {
    }
    if (!a) throw py::type_error(what + ": expected a NumPy array of float32, got " + std::string(py::str(py::type::of(obj))));
    const char kind = a.dtype().kind();
    if (kind != 'f' && kind != 'i' && kind != 'u')
        throw py::type_error(what + ": expected a float32 array, got dtype " + std::string(py::str(a.dtype())));
    return F32Array::ensure(a);
}

std::string shape_text(const py::array& a) {
    std::string s = "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + (a.ndim() == 1 ? ",)" : ")");
}

void check_shape(const F32Array& a, const std::vector<py::ssize_t>& shape, const std::string& what,
                 const std::string& dims) {
    bool ok = a.ndim() == (py::ssize_t)shape.size();
    for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] < 0 || a.shape((py::ssize_t)i) == shape[i];
    if (!ok) throw py::value_error(what + ": expected shape " + dims + ", got " + shape_text(a));
}

void check_finite(const F32Array& a, const std::string& what) {
    const float* p = a.data();
    const py::ssize_t n = a.size();
    for (py::ssize_t i = 0; i < n; ++i)
        if (!std::isfinite(p[i]))
            throw py::value_error(what + ": NaN or Inf at flat index " + std::to_string(i) + " (shape " +
                                  shape_text(a) + ")");
}

}  // namespace retro::pyb
