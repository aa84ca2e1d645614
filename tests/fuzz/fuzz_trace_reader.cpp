// libFuzzer target: the trace reader on mutated HDF5 files (seeds: tests/fuzz/corpus/trace_reader, tiny
// valid traces). Each input is written to a temporary file, opened with TraceReader (metadata checks),
// and the first layer's first KV head is read (values, NaN/Inf checks). Bad files must raise
// retro::Error; anything else (a crash, a sanitizer finding, another exception) is a bug.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "trace/reader.hpp"

namespace {
std::string g_path;
}

// HDF5 (Debian's build, not instrumented) sizes its metadata cache entries from the file: a corrupt
// header makes it malloc absurd sizes (0xa1a0a0d46444889 bytes, found by this target), which glibc
// refuses with NULL and HDF5 turns into an error (a TraceError here). ASan aborts on such requests by
// default; returning NULL as glibc does keeps HDF5's own error path. retro-bench's allocations use
// operator new, which still fails (std::bad_alloc escaping the target is a finding).
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    // A header may declare up to 2^30 tokens: the reader refuses slices above this limit (ResourceError)
    // instead of exhausting libFuzzer's default 2 GB RSS limit.
    setenv("RETRO_MAX_MEMORY", "256M", 1);
    char tmpl[] = "/tmp/retro-fuzz-trace-XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd < 0) std::abort();
    close(fd);
    g_path = tmpl;
    std::atexit([] { std::remove(g_path.c_str()); });
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FILE* f = std::fopen(g_path.c_str(), "wb");
    if (!f) std::abort();
    if (size && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
    try {
        retro::TraceReader r(g_path);
        const retro::TraceInfo& info = r.info();
        if (!info.layers.empty()) {
            const retro::HeadSlice s = r.read_head(info.layers.front(), 0);
            // the slice's arrays must have the sizes its header promises
            const size_t d = (size_t)s.head_dim;
            if (s.keys.size() != (size_t)s.n_tokens() * d || s.values.size() != s.keys.size() ||
                s.queries.size() != (size_t)s.group * s.num_steps * d ||
                s.prefill_queries.size() != (size_t)s.group * s.num_prefill * d)
                std::abort();
        }
    } catch (const retro::Error&) {
        // a clear error naming the file: the expected outcome for a malformed trace
    }
    return 0;
}
