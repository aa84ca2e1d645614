// `magicpig`: MagicPIG's LSH sampling. Offloaded keys are mean-centered and SimHashed into L tables of K
// bits; a token is sampled for a query head when it shares the query's bucket in at least 2 tables, and
// attention over the samples is importance-weighted by 1 / (its sampling probability), LSE-merged with
// exact attention over the static sink + local + decode tokens. docs/methods/magicpig.md.
#include <memory>
#include <string>

#include "core/error.hpp"
#include "methods/builtin_methods.hpp"
#include "methods/magicpig.hpp"

namespace retro {

namespace {
// The method: the JSON-free head (methods/magicpig_head) and its scratch; the GPU twin runs the same head.
class MagicPig final : public Method {
  public:
    explicit MagicPig(MagicPigHeadParams p) : head_(p) {}

    void build(const MethodContext& ctx, const KVView& prompt) override {
        head_.build(ctx, prompt);
        n_seen_ = prompt.n;
    }

    void append(const KVView&, int pos) override { n_seen_ = pos + 1; }

    void select(const float* q, int, const KVView& kv, Selection& out) override {
        n_seen_ = kv.n;
        head_.select(q, kv.n, scratch_, out);
    }

    Footprint footprint() const override { return head_.footprint(n_seen_); }

  private:
    MagicPigHead head_;
    MagicPigScratch scratch_;
    int n_seen_ = 0;
};
}  // namespace

MagicPigHeadParams magicpig_params_from_json(const nlohmann::json& j) {
    MagicPigHeadParams p;
    p.hash.K = j.at("K").get<int>();
    p.hash.L = j.at("L").get<int>();
    p.hash.seed = j.at("seed").get<uint64_t>();
    p.min_collisions = j.at("min_collisions").get<int>();
    p.sink = j.at("sink").get<int>();
    p.window = j.at("window").get<int>();
    return p;
}

MethodInfo magicpig_method_info() {
    MethodInfo m;
    m.name = "magicpig";
    m.description = "MagicPIG: SimHash LSH sampling (>= 2 of L tables) with importance weights + sink/local";
    m.paper = "Chen et al., MagicPIG: LSH Sampling for Efficient LLM Generation (ICLR 2025)";
    m.params = {
        {"K", ParamType::integer, 10, "SimHash bits per table (0 = every token collides: exact attention)",
         "MagicPIG README (K=10, L=150); CTKVR also runs (9,120), (8,75)", 0, 30},
        {"L", ParamType::integer, 150, "hash tables", "MagicPIG README (K=10, L=150)", 1, 1e5},
        {"min_collisions", ParamType::integer, 2, "tables a token must share with the query to be sampled",
         "MagicPIG library/lsh (mask value 2)", 1, 1e5},
        {"sink", ParamType::integer, 4, "static initial tokens kept on the GPU",
         "MagicPIG models/attnserver.py num_sink_tokens = 4", 0, 1e9},
        {"window", ParamType::integer, 64,
         "static last prompt tokens kept on the GPU (decode tokens stay on the GPU too)",
         "MagicPIG models/attnserver.py num_local_tokens = 64", 0, 1e9},
        {"seed", ParamType::integer, 0, "seed of the hash hyperplanes (mixed with the run's per-head seed)",
         "ours", 0, 4294967295.0},
    };
    m.check = [](const nlohmann::json& j) {
        const long L = j.at("L").get<long>(), mc = j.at("min_collisions").get<long>();
        if (mc > L)
            throw ParamError("parameter 'min_collisions' = " + std::to_string(mc) + " exceeds 'L' = " +
                             std::to_string(L) + " (no token could ever be sampled)");
    };
    m.make = [](const nlohmann::json& j) { return std::make_unique<MagicPig>(magicpig_params_from_json(j)); };
    return m;
}

}  // namespace retro
