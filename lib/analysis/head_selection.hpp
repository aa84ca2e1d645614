#pragma once
// Which (layer, KV head) slices an analysis reads, and the parallel map over them: the head selection
// of the analyses in lib/analysis and of `retro-bench inspect` ("--layers 0,5" / "--kv-heads 1,3"
// lists, checked against the trace before any work; the messages name those options).
#include <omp.h>

#include <exception>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "core/host.hpp"
#include "trace/reader.hpp"

namespace retro {

/// "1,2,3" -> {1, 2, 3}; an item that is not an integer is a ConfigError naming `--option`.
std::vector<int> parse_int_list(const std::string& s, const char* option);

/// {1, 2, 3} -> "1,2,3".
std::string join_ints(const std::vector<int>& v);

struct HeadSelection {
    std::vector<int> layers;    ///< layer indices present in the trace
    std::vector<int> kv_heads;  ///< KV heads in [0, num_kv_heads)
};

/// Layers and KV heads from --layers / --kv-heads (empty = all), each checked against the trace:
/// a layer the file does not hold or a KV head out of range is a ConfigError naming the option.
HeadSelection select_heads(const TraceReader& reader, const std::string& path, const std::string& layers,
                           const std::string& kv_heads);

struct HeadRef {
    int layer = 0;
    int kv = 0;
};

/// Every (layer, KV head) of `sel`, layers outer: the order of map_heads' results.
inline std::vector<HeadRef> head_refs(const HeadSelection& sel) {
    std::vector<HeadRef> v;
    for (int l : sel.layers)
        for (int k : sel.kv_heads) v.push_back({l, k});
    return v;
}

/// f(slice) for every head of `sel` (read without prefill queries unless `ro` asks), on `threads` OpenMP
/// threads (0 = all) with BLAS kept serial inside each; results in head_refs order. The first error is
/// rethrown after every head has finished.
template <class F>
auto map_heads(const TraceReader& reader, const HeadSelection& sel, int threads, F f,
               ReadOptions ro = ReadOptions{.prefill_queries = false})
    -> std::vector<std::invoke_result_t<F&, const HeadSlice&>> {
    const std::vector<HeadRef> refs = head_refs(sel);
    std::vector<std::invoke_result_t<F&, const HeadSlice&>> out(refs.size());
    std::exception_ptr err;
    std::mutex mu;
    const int n_threads = threads > 0 ? threads : omp_get_max_threads();
    if (n_threads > 1 && refs.size() > 1) set_blas_threads(1);
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)
    for (size_t i = 0; i < refs.size(); ++i) {
        try {
            const HeadSlice s = reader.read_head(refs[i].layer, refs[i].kv, ro);
            out[i] = f(s);
        } catch (...) {
            std::lock_guard<std::mutex> lk(mu);
            if (!err) err = std::current_exception();
        }
    }
    if (err) std::rethrow_exception(err);
    return out;
}

}  // namespace retro
