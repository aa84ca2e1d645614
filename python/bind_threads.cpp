// set_threads / get_threads: the threads the module's C++ work may use (OpenBLAS and OpenMP), so that a
// caller that parallelizes by itself (several processes, a model running beside the methods) does not
// oversubscribe the cores (lib/core/host.hpp, set_compute_threads).
#include "bindings.hpp"
#include "core/host.hpp"

namespace retro::pyb {

void bind_threads(py::module_& m) {
    m.def(
        "set_threads",
        [](int n) {
            if (n < 1) throw py::value_error("set_threads: n = " + std::to_string(n) + ": expected >= 1");
            set_compute_threads(n);
        },
        py::arg("n"),
        "Threads for the C++ work of this process's calls (OpenBLAS, process-wide; OpenMP, for the calling "
        "thread): 1 when the caller runs several workers or shares the machine. Results do not depend on it.");
    m.def("get_threads", [] { return compute_threads(); },
          "min(OpenBLAS threads, OpenMP max threads): what a k-means build may use.");
}

}  // namespace retro::pyb
