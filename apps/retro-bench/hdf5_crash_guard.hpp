#pragma once
// Ends the program with a clear error, exit 2, when HDF5 crashes while reading a trace file's metadata
// (HDF5 1.10.8 dereferences a corrupt global heap in H5HG_read: tests/fuzz/hdf5-findings/segv-*.h5,
// docs/testing.md), instead of dying with SIGSEGV:
//   retro-bench: error: FILE: HDF5 crashed reading its metadata (SIGSEGV; corrupt file?)
//
// Why a signal handler and not a forked child that reads each file's metadata first: a probe child
// costs a fork + a second open of every trace in every command, and would have to repeat exactly the
// reads TraceReader makes (or a crash on a read it skipped would still kill the parent). The handler
// costs nothing until a fault, covers every metadata read TraceReader makes in any command, and tells
// a crash in HDF5 on a corrupt file apart from a bug: it acts only when the faulting thread is inside a
// MetadataReadScope (lib/trace/metadata_watch.hpp). Any other fatal signal goes to the handler that was
// there before (ASan's reporter in the sanitizer build; the default action, a core dump, otherwise).
namespace retro::cli {

/// Installs the handler for SIGSEGV, SIGBUS, SIGFPE and SIGILL (once; later calls do nothing), on an
/// alternate signal stack for the calling thread if it has none (so a stack overflow inside HDF5 is
/// reported too). Call it from main, after the sanitizer run-time has installed its own handlers (it
/// does so before main), so that they are kept as the fallback.
void install_hdf5_crash_guard();

}  // namespace retro::cli
