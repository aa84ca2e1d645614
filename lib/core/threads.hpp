#pragma once
// The compute threads of BLAS and OpenMP: JSON- and HDF5-free, so the RETRO_GPU_ONLY build (no Debian
// libraries) links it too (kernels/kmeans.cu's probe pass asks compute_threads()).

#include <functional>

namespace retro {

/// Sets OpenBLAS's (process-wide) thread count, n >= 1; returns false in a build without BLAS
/// (RETRO_NO_BLAS), where there is none to set. The runner sets 1 while it runs heads
/// on several threads, so BLAS calls inside methods do not oversubscribe the cores.
bool set_blas_threads(int n);

/// The threads one caller's compute may use inside a method: OpenBLAS's (process-wide) and OpenMP's
/// (the calling thread's default team size, which sizes k-means's parallel segments). For a process that
/// runs methods from its own threads or shares the machine (the Python binding inside a model's decode,
/// several closed-loop workers): OpenMP teams on an oversubscribed core spin at every barrier, which made
/// a 2K-token wave build 20x slower than on one thread. n >= 1.
void set_compute_threads(int n);

/// min(OpenBLAS threads, OpenMP max threads) as the methods see it (1 without BLAS or OpenMP).
int compute_threads();

/// Calls fn(i) once for every i in [0, n) on up to `threads` threads, the caller's among them (threads <= 0:
/// std::thread::hardware_concurrency()), items handed out in order; returns when every item is done and
/// rethrows the exception of the lowest item that threw (the others still run). For independent builds of
/// about equal cost — one per (sequence, KV head) — whose results do not depend on where they run: while
/// it runs with more than one thread, OpenBLAS is held at one thread and each thread's OpenMP team at one
/// (the items' own parallel loops would oversubscribe the cores), both restored after. std::thread only:
/// the RETRO_GPU_ONLY build (no OpenMP) runs its host builds through it on a lent machine's cores.
void for_each_item(int n, int threads, const std::function<void(int)>& fn);

}  // namespace retro
