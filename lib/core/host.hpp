#pragma once
// Facts about the machine and build recorded in every manifest (results must say where they came from).
#include <nlohmann/json.hpp>
#include <string>

#include "core/threads.hpp"  // set_blas_threads, set_compute_threads, compute_threads (were declared here)

namespace retro {

/// Path of the shared library that provides sgemm_ in this process (e.g.
/// ".../openblas-pthread/libblas.so.3"), resolved through symlinks, or "unknown".
std::string active_blas();

/// {hostname, cpu_model, cpu_cores, memory_gb, os, blas, cpu_flags (the vector instruction sets present:
/// avx2, avx512f, ...), versions {faiss, hdf5, blas, cuda}, git_revision, version, cuda_built}. Never
/// throws: a field it cannot read says "unknown" (or is empty).
nlohmann::json host_info();

/// Revision of the source this binary was built from (`git describe --always --dirty`).
const char* git_revision();

/// The source tree this binary was built from (scripts, configs/hardware); may be gone on a copied install.
const char* source_dir();

/// Peak resident set size of this process so far, in bytes (getrusage ru_maxrss; 0 if unavailable).
/// A high-water mark: it never decreases, so a run's value includes everything before it in the process.
double peak_rss_bytes();

/// Current UTC time as ISO 8601 ("2026-11-23T04:05:06Z").
std::string utc_now_iso();

/// Current UTC time for file names ("20261123T040506Z").
std::string utc_now_compact();

}  // namespace retro
