#include "py_arrays.hpp"

namespace retro::pym {

py::array readonly_view(const float* p, std::vector<py::ssize_t> shape) {
    // The capsule is the view's base (so NumPy does not copy) and frees nothing: the runner owns p.
    py::capsule base(p, [](void*) {});
    py::array a(py::dtype::of<float>(), std::move(shape), {}, p, base);
    py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
    return a;
}

std::string kept_reference(const py::handle& obj, const std::string& what) {
    // A NumPy view of the array (a slice, np.asarray) references it as its base, so this also catches
    // kept slices.
    if (obj.ref_count() <= 1) return "";
    return "kept a reference to " + what +
           " after the call returned (the arrays are read-only views of the harness's buffers, valid only "
           "during the call): keep a copy instead, e.g. np.array(" + what + ")";
}

}  // namespace retro::pym
