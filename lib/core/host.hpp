#pragma once
// Facts about the machine and build recorded in every manifest (results must say where they came from).
#include <nlohmann/json.hpp>
#include <string>

namespace retro {

/// Path of the shared library that provides sgemm_ in this process (e.g.
/// ".../openblas-pthread/libblas.so.3"), resolved through symlinks, or "unknown".
std::string active_blas();

/// {hostname, cpu_model, cpu_cores, memory_gb, os, blas, git_revision, version, cuda_built}
nlohmann::json host_info();

/// Revision of the source this binary was built from (`git describe --always --dirty`).
const char* git_revision();

/// The source tree this binary was built from (scripts, configs/hardware); may be gone on a copied install.
const char* source_dir();

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

/// Peak resident set size of this process so far, in bytes (getrusage ru_maxrss; 0 if unavailable).
/// A high-water mark: it never decreases, so a run's value includes everything before it in the process.
double peak_rss_bytes();

/// Current UTC time as ISO 8601 ("2026-11-23T04:05:06Z").
std::string utc_now_iso();

/// Current UTC time for file names ("20261123T040506Z").
std::string utc_now_compact();

}  // namespace retro
