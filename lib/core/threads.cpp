#include "core/threads.hpp"

#include <algorithm>

#ifndef RETRO_NO_BLAS
#include <cblas.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

namespace retro {

bool set_blas_threads(int n) {
    // A direct call, not a dlsym(RTLD_DEFAULT) lookup: inside the Python module (loaded RTLD_LOCAL) the
    // library's OpenBLAS is not in the global scope, and the library links OpenBLAS anyway.
#ifndef RETRO_NO_BLAS
    openblas_set_num_threads(std::max(1, n));
    return true;
#else
    (void)n;
    return false;
#endif
}

void set_compute_threads(int n) {
    n = std::max(1, n);
    set_blas_threads(n);
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
}

int compute_threads() {
    int n = 1 << 20;
#ifndef RETRO_NO_BLAS
    n = std::min(n, openblas_get_num_threads());
#endif
#ifdef _OPENMP
    n = std::min(n, omp_get_max_threads());
#endif
    return n == (1 << 20) ? 1 : n;
}

}  // namespace retro
