#pragma once
// Holds OpenBLAS single-threaded while in scope and restores its thread count after. OpenBLAS splits a
// product differently for different thread counts, which changes float summation order in the last
// bits; the harness's results must not depend on the thread count (a resumed run with fewer pending
// heads runs on fewer worker threads, and the runner leaves BLAS multi-threaded when it runs one).
// OpenBLAS's thread count is process-wide: when the runner runs several workers it is already 1 and
// this does nothing. Without BLAS (RETRO_NO_BLAS, the GPU-only build) it is a no-op.
#ifndef RETRO_NO_BLAS
#include <cblas.h>
#endif

namespace retro {

class SerialBlas {
  public:
    explicit SerialBlas(bool active = true) {
#ifndef RETRO_NO_BLAS
        prev_ = active ? openblas_get_num_threads() : 1;
        if (prev_ != 1) openblas_set_num_threads(1);
#else
        (void)active;
#endif
    }
    ~SerialBlas() {
#ifndef RETRO_NO_BLAS
        if (prev_ != 1) openblas_set_num_threads(prev_);
#endif
    }
    SerialBlas(const SerialBlas&) = delete;
    SerialBlas& operator=(const SerialBlas&) = delete;

  private:
    int prev_ = 1;
};

}  // namespace retro
