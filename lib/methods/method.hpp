#pragma once
// The method interface. A method sees one layer x one KV head: it indexes the prompt's keys/values
// (build), optionally absorbs decode-time tokens (append), and for each decode step says which tokens
// the GQA group attends exactly and which clusters it estimates (select). It reports its own work and
// data movement; every accuracy metric is computed by the harness from the Selection.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "trace/trace.hpp"

namespace retro {

/// What a method may know about the head it serves. `slice` gives access to prefill queries (for
/// query-aware indexes); a method must read keys/values only through the KVView it is handed, and only
/// tokens that are visible.
struct MethodContext {
    int layer = 0;
    int kv_head = 0;
    int head_dim = 0;
    int group = 1;          ///< query heads sharing this KV head
    int prompt_len = 0;
    float scale = 1.0f;     ///< 1/sqrt(head_dim)
    DType storage = DType::f16;  ///< dtype of the KV as the modeled system stores it (byte accounting)
    const HeadSlice* slice = nullptr;
    unsigned seed = 0;      ///< per-head seed derived from the run (for randomized methods)

    /// Bytes of one token's key + value in storage dtype.
    double kv_token_bytes() const { return 2.0 * head_dim * (double)dtype_bytes(storage); }
};

/// Keys and values of tokens [0, n): keys [n, d], values [n, d], row-major float32.
struct KVView {
    const float* keys = nullptr;
    const float* values = nullptr;
    int n = 0;
    int d = 0;
    const float* key(int i) const { return keys + (size_t)i * d; }
    const float* value(int i) const { return values + (size_t)i * d; }
};

/// A cluster estimated (not attended exactly): `size` tokens represented by a centroid key [d] and the
/// sum of their values [d] (RetroInfer Eq. 2-4). Pointers stay valid until the method's next call.
struct EstimatedCluster {
    const float* centroid = nullptr;
    double size = 0;
    const float* value_sum = nullptr;
};

/// The answer of Method::select for one decode step of one GQA group.
struct Selection {
    /// Token ids attended exactly: either one list shared by the whole group (size 1) or one list per
    /// query head (size group). Ids must be in [0, n_visible) and unique within a list.
    std::vector<std::vector<int32_t>> exact;
    /// Optional per-token log weights, parallel to `exact` (same number of lists, same lengths): token
    /// exact[l][j] counts exp(exact_log_weight[l][j]) times in the softmax numerator and denominator
    /// (sampling methods' importance weights, e.g. MagicPIG's 1/collision probability). Empty = all 1.
    std::vector<std::vector<float>> exact_log_weight;
    /// Clusters estimated for the whole group (disjoint from the exact tokens by construction).
    std::vector<EstimatedCluster> estimated;
    double scan_ops = 0;   ///< inner products (or equivalent) the selection itself performed
    double h2d_bytes = 0;  ///< host->device bytes this step (KV fetched, codes, index data)
    double d2h_bytes = 0;  ///< device->host bytes this step (e.g. queries sent to a CPU index)

    /// What this step needs from CPU memory (offloaded KV), for the GPU block cache of the system model
    /// (lib/system, docs/system-model.md), most important first. Either units the method defines
    /// (wave: cluster ids, with fetch_unit_tokens their sizes in tokens), or token ids (fetch_tokens)
    /// that the system groups into blocks of consecutive positions. Both empty: nothing goes through
    /// the cache and h2d_bytes is taken as reported. h2d_bytes stays the method's no-cache figure; the
    /// harness records the post-cache value.
    std::vector<int64_t> fetch_units;
    std::vector<int32_t> fetch_unit_tokens;  ///< tokens of each fetch_units entry
    std::vector<int32_t> fetch_tokens;

    void clear() {
        exact.clear();
        exact_log_weight.clear();
        estimated.clear();
        scan_ops = h2d_bytes = d2h_bytes = 0;
        fetch_units.clear();
        fetch_unit_tokens.clear();
        fetch_tokens.clear();
    }
    /// Exact list of group member g.
    std::span<const int32_t> exact_for(int g) const {
        if (exact.empty()) return {};
        return exact.size() == 1 ? std::span<const int32_t>(exact[0])
                                 : std::span<const int32_t>(exact[(size_t)g]);
    }
    /// Log weights of group member g's list, or nullptr when unweighted.
    const float* log_weight_for(int g) const {
        if (exact_log_weight.empty()) return nullptr;
        return exact_log_weight.size() == 1 ? exact_log_weight[0].data()
                                            : exact_log_weight[(size_t)g].data();
    }
    /// A single shared list, for methods that select for the whole group.
    std::vector<int32_t>& shared() {
        exact.resize(1);
        return exact[0];
    }
};

/// Memory a method keeps, per KV head.
struct Footprint {
    double gpu_bytes = 0;  ///< GPU-resident: KV kept on GPU, index data, caches, codes
    double cpu_bytes = 0;  ///< CPU-resident index data (not counting the offloaded KV itself)
};

class Method {
  public:
    virtual ~Method() = default;

    /// Builds the index over the prompt: prompt.keys/values [prompt_len, d].
    virtual void build(const MethodContext& ctx, const KVView& prompt) = 0;

    /// Decode-time token `pos` (= prompt_len + t) became visible; kv holds tokens [0, pos].
    virtual void append(const KVView& kv, int pos) {}

    /// Selection for decode step `step`: queries [group, d] (the group's queries at this step),
    /// kv holds the n_visible = prompt_len + step + 1 visible tokens.
    virtual void select(const float* queries, int step, const KVView& kv, Selection& out) = 0;

    /// Memory kept after build/append.
    virtual Footprint footprint() const { return {}; }

    /// A copy of this built method (index and all, nothing appended since build) for another point of
    /// the same method whose parameters differ from this one's only in search-time ones
    /// (ParamSpec::search): `fresh` is that point's method as MethodInfo::make returns it, unbuilt. The
    /// copy keeps this build and takes `fresh`'s parameters; it then behaves exactly as `fresh` built
    /// on the same prompt would. nullptr: this method cannot share its build (the caller builds anew).
    /// A copy must not keep pointers into this object (MethodContext::slice is read in build() only).
    virtual std::unique_ptr<Method> clone_built(const Method& fresh) const { return nullptr; }
};

/// clone_built for a copyable method class T whose parameters are the member `params`: a copy of
/// `built` with `fresh`'s parameters, or nullptr when `fresh` is not a T.
template <class T, class P>
std::unique_ptr<Method> copy_built(const T& built, const Method& fresh, P T::*params) {
    const T* f = dynamic_cast<const T*>(&fresh);
    if (f == nullptr) return nullptr;
    auto c = std::make_unique<T>(built);
    (*c).*params = (*f).*params;
    return c;
}

/// Resolves a token budget: b >= 1 is an absolute count, 0 < b < 1 a fraction of n (rounded, at least
/// 1); the result is clamped to [0, n].
int resolve_budget(double b, int n);

/// Appends to `out` the ids of best-first lists interleaved rank by rank (every list's first, then every
/// list's second, ...), each id once: the order in which a group's retrieved tokens are fetched.
void append_interleaved_unique(const std::vector<std::vector<int32_t>>& lists, std::vector<int32_t>& out);

}  // namespace retro
