// full_attention: exact attention of a group of queries over every key, the reference the evaluator
// scores against (the same code: attention/group_attention), for tests and notebooks.
#include <cmath>

#include "attention/group_attention.hpp"
#include "bindings.hpp"
#include "numpy_util.hpp"

namespace retro::pyb {

void bind_attention(py::module_& m) {
    m.def(
        "full_attention",
        [](const py::object& queries_in, const py::object& keys_in, const py::object& values_in,
           const py::object& scale_in) {
            const F32Array q = as_f32(queries_in, "full_attention: queries");
            const F32Array k = as_f32(keys_in, "full_attention: keys");
            const F32Array v = as_f32(values_in, "full_attention: values");
            check_shape(q, {-1, -1}, "full_attention: queries", "[group, head_dim]");
            const py::ssize_t g = q.shape(0), d = q.shape(1);
            const std::string dd = "head_dim=" + std::to_string(d);
            check_shape(k, {-1, d}, "full_attention: keys", "[n, " + dd + "]");
            const py::ssize_t n = k.shape(0);
            check_shape(v, {n, d}, "full_attention: values", "[n=" + std::to_string(n) + ", " + dd + "]");
            if (n == 0) throw py::value_error("full_attention: keys hold no token");
            if (d == 0) throw py::value_error("full_attention: head_dim is 0");
            const float scale = scale_in.is_none() ? 1.0f / std::sqrt((float)d) : scale_in.cast<float>();
            std::vector<float> out((size_t)(g * d));
            std::vector<double> lse((size_t)g);
            {
                py::gil_scoped_release nogil;
                GroupFlashScratch scratch;
                group_exact_attention(q.data(), (int)g, k.data(), v.data(), (int)n, (int)d, scale, nullptr, nullptr,
                                      out.data(), lse.data(), scratch);
            }
            return py::make_tuple(to_numpy(std::move(out), {g, d}), to_numpy(std::move(lse), {g}));
        },
        py::arg("queries"), py::arg("keys"), py::arg("values"), py::arg("scale") = py::none(),
        "Exact attention: queries [group, d], keys [n, d], values [n, d] -> (out [group, d] float32, "
        "lse [group] float64); scale defaults to 1/sqrt(d), as every method and the evaluator use.");
}

}  // namespace retro::pyb
