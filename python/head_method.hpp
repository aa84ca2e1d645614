#pragma once
// One method instance on one (layer, KV head), driven from outside the runner: the object behind the
// Python binding's HeadMethod (docs/python.md). It owns a growing copy of the head's KV, calls the method
// exactly as the runner does (build on the prompt, append per decode token, select per step) and turns a
// Selection into the attention output the evaluator scores (metrics/selection_output). No Python here.
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "methods/method.hpp"
#include "methods/params.hpp"
#include "metrics/selection_output.hpp"

namespace retro {

struct HeadMethodOptions {
    int layer = 0;    ///< layer and KV head the instance serves (method context, default seed)
    int kv_head = 0;
    bool seed_given = false;  ///< false: the seed `retro-bench run` uses (bench/head_run method_seed)
    unsigned seed = 0;
    DType storage = DType::f16;  ///< dtype the modeled system stores the KV in (byte accounting)
};

/// What one attend() call returns for the group's `group` query heads.
struct AttendResult {
    std::vector<float> out;   ///< [group, d] approximate attention output
    std::vector<double> lse;  ///< [group] its log-sum-exp (-inf when nothing was selected)
    int n_visible = 0;        ///< tokens visible at this step (prompt + appended)
    Selection sel;            ///< the method's selection (estimated clusters' pointers are not kept valid)
    double est_tokens = 0;    ///< tokens the estimated clusters stand for
    int est_clusters = 0;
    double fetch_tokens = 0;  ///< tokens the selection asks from CPU memory (no GPU cache applied)
};

class HeadMethod {
  public:
    /// Resolves `params` (defaults, ranges: ConfigError naming method and parameter) and creates the
    /// method for a head of dimension head_dim serving `group` query heads.
    HeadMethod(const std::string& method, const nlohmann::json& params, int head_dim, int group,
               const HeadMethodOptions& opt);

    /// Indexes the prompt: keys/values [n, d]; prefill_queries [group, n_prefill, d] (may be null when
    /// n_prefill = 0). Copies what it keeps. Throws ParamError when called twice.
    void build(const float* keys, const float* values, int n, const float* prefill_queries, int n_prefill);

    /// Decode tokens keys/values [m, d] become visible at positions visible()..visible()+m-1, one
    /// Method::append per token (as the runner does).
    void append(const float* keys, const float* values, int m);

    /// Selection and output for decode step `step` with queries [group, d]; step must be
    /// visible() - prompt_len() - 1 (the step's own token appended first, as in the runner).
    void attend(const float* queries, int step, AttendResult& r);

    Footprint footprint() const;

    /// A built HeadMethod for `params` (this method's; resolved here) that shares this instance's build:
    /// the method's index copied (Method::clone_built), the prompt's KV and prefill queries copied,
    /// nothing appended; the seed is this one's (the seed ignores search-time parameters). It behaves
    /// exactly as a new HeadMethod for `params` built on the same prompt. Returns nullptr when the method
    /// cannot share its build (build a new one). Throws ParamError when this instance is not built, has
    /// decode tokens appended, or `params` differ from its own in a build parameter (named).
    std::unique_ptr<HeadMethod> clone_for(const nlohmann::json& params) const;

    const std::string& method() const { return method_; }
    const nlohmann::json& params() const { return params_; }
    const MethodContext& context() const { return ctx_; }
    bool built() const { return built_; }
    int prompt_len() const { return slice_.prompt_len; }
    int visible() const { return slice_.prompt_len + slice_.num_steps; }

    /// Serializes calls from several Python threads (the binding releases the GIL).
    std::mutex& mutex() { return mu_; }

  private:
    KVView kv() const { return {slice_.keys.data(), slice_.values.data(), visible(), ctx_.head_dim}; }
    void require_built(const char* what) const;

    std::string method_;
    nlohmann::json params_;
    std::unique_ptr<Method> m_;
    MethodContext ctx_;
    HeadSlice slice_;  ///< keys/values of every visible token, prefill queries; no decode queries
    bool built_ = false;
    SelectionCheckScratch check_;
    GroupScratch group_scratch_;
    std::mutex mu_;
};

}  // namespace retro
