#include "core/threads.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

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

namespace {

/// The calling thread's OpenMP team size while in scope (an ICV of this thread alone), restored after.
class ThreadTeam {
  public:
    explicit ThreadTeam(int n) {
#ifdef _OPENMP
        prev_ = omp_get_max_threads();
        omp_set_num_threads(n);
#else
        (void)n;
#endif
    }
    ~ThreadTeam() {
#ifdef _OPENMP
        omp_set_num_threads(prev_);
#endif
    }
    ThreadTeam(const ThreadTeam&) = delete;
    ThreadTeam& operator=(const ThreadTeam&) = delete;

  private:
    int prev_ = 1;
};

}  // namespace

void for_each_item(int n, int threads, const std::function<void(int)>& fn) {
    if (n <= 0) return;
    if (threads <= 0) threads = (int)std::max(1u, std::thread::hardware_concurrency());
    threads = std::min(threads, n);
    if (threads == 1) {
        for (int i = 0; i < n; ++i) fn(i);
        return;
    }
#ifndef RETRO_NO_BLAS
    const int blas = openblas_get_num_threads();
    openblas_set_num_threads(1);
#endif
    std::atomic<int> next{0};
    std::vector<std::exception_ptr> errors((size_t)n);
    const auto work = [&] {
        ThreadTeam team(1);
        for (int i; (i = next.fetch_add(1)) < n;) try {
                fn(i);
            } catch (...) {
                errors[(size_t)i] = std::current_exception();
            }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) try {
            pool.emplace_back(work);
        } catch (const std::system_error&) {  // no more threads to be had: the ones running take every item
            break;
        }
    work();
    for (std::thread& t : pool) t.join();
#ifndef RETRO_NO_BLAS
    openblas_set_num_threads(blas);
#endif
    for (const std::exception_ptr& e : errors)
        if (e) std::rethrow_exception(e);
}

}  // namespace retro
