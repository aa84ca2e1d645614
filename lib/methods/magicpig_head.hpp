#pragma once
// MagicPIG's per-head state and selection as a JSON-free class (the method `magicpig`, lib/methods/magicpig.cpp,
// is a thin wrapper; its GPU twin's layer run, kernels/run/magicpig_layer.cpp, builds the tables with it and
// runs its collision test, sampling and weights on the host's cores, and the kernel checks,
// kernels/magicpig/magicpig_checks.cpp, compare the GPU's query codes with its tables'). The RETRO_GPU_ONLY
// reference library links it. docs/methods/magicpig.md.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cluster/simhash.hpp"
#include "methods/method.hpp"

namespace retro {

struct MagicPigHeadParams {
    SimHashParams hash;      ///< K bits per table, L tables, seed (mixed with the head's seed)
    int min_collisions = 2;  ///< tables a token must share with the query to be sampled
    int sink = 4;            ///< static initial tokens (GPU)
    int window = 64;         ///< static last prompt tokens (GPU); decode tokens stay on the GPU
};

/// The scratch of one caller of MagicPigHead::sample / select (each host thread its own).
struct MagicPigScratch {
    std::vector<uint32_t> count, codes;
    std::vector<int32_t> touched;
};

class MagicPigHead {
  public:
    explicit MagicPigHead(MagicPigHeadParams p = {}) : p_(p) {}

    /// Centers the offloaded prompt keys [sink, prompt - window), hashes them into the tables (the hyperplanes
    /// drawn from p.hash.seed and ctx's seed, layer and KV head) and keeps their norms.
    void build(const MethodContext& ctx, const KVView& prompt);

    const MagicPigHeadParams& params() const { return p_; }
    const MethodContext& context() const { return ctx_; }
    int sink_end() const { return ib_; }     ///< static initial tokens [0, sink_end)
    int offload_end() const { return ie_; }  ///< offloaded tokens [sink_end, offload_end); static from there
    bool empty() const { return centered_.empty(); }  ///< nothing offloaded: no tables, nothing sampled
    const SimHashTables& tables() const { return tables_; }

    /// Appends the static tokens at n visible tokens, [0, min(sink_end, n)) then [offload_end, n), log weight 0.
    void static_tokens(int n, std::vector<int32_t>& ids, std::vector<float>& lw) const;

    /// Appends the sampled offloaded tokens of query q [d] whose codes in the L tables are `codes` [L] (the
    /// tables' codes(q), or the GPU's): every token sharing q's bucket in >= min_collisions tables, in id
    /// order, with log weight -log P(sampled). Returns the bucket entries visited. No-op when empty().
    size_t sample(const float* q, const uint32_t* codes, MagicPigScratch& s, std::vector<int32_t>& ids,
                  std::vector<float>& lw) const;

    /// The method's selection of group queries q [g, d] at n visible tokens, codes hashed here: per query
    /// head the static tokens then its samples, with the accounting (account()).
    void select(const float* q, int n, MagicPigScratch& s, Selection& out) const;

    /// select's accounting: scan_ops (the query projections), d2h_bytes (queries + codes to the CPU),
    /// h2d_bytes (partial outputs + LSE back).
    void account(Selection& out) const;

    /// GPU: static KV at n_seen visible tokens + hyperplanes; CPU: tables + key norms.
    Footprint footprint(int n_seen) const;

  private:
    MagicPigHeadParams p_;
    MethodContext ctx_;
    int ib_ = 0, ie_ = 0;
    std::vector<float> mean_, centered_, norm_;
    SimHashTables tables_;
};

}  // namespace retro
