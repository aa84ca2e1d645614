#pragma once
// The harness side of every measurement: exact attention for each query head of a GQA group at a
// decode step (the oracle), and the metrics of a method's Selection against it (docs/metrics.md).
// Both read K and V once per step for the whole group (lib/attention/group_attention.hpp).
#include <span>
#include <vector>

#include "attention/attention.hpp"
#include "attention/group_attention.hpp"
#include "methods/method.hpp"
#include "metrics/selection_output.hpp"
#include "trace/trace.hpp"

namespace retro {

/// Exact attention of one query head at one step over its n visible tokens.
struct HeadReference {
    std::span<const float> scores;   ///< [n] scale * q.k_i (a row of the evaluator's [group, n] buffer)
    std::span<const float> weights;  ///< [n] softmax(scores)
    std::vector<float> out;      ///< [d] exact output
    double lse = 0;
    std::vector<float> recall_threshold;  ///< per recall k: tie-tolerant score threshold of the top-k
    std::vector<int> recall_kk;           ///< per recall k: min(k, n)
};

/// q_step metrics of one query head at one step, in metric_registry order after the recall@k entries.
struct QueryMetrics {
    std::vector<double> recall;  ///< per recall k
    double mass = 0, out_err = 0, out_cos = 0, lse_err = 0, exact_frac = 0, est_frac = 0;
};

class Evaluator {
  public:
    /// slice: the head being evaluated; recall_k: cut-offs for recall@k.
    Evaluator(const HeadSlice& slice, std::vector<int> recall_k);

    /// Computes the exact reference of every query head of the group at decode step t.
    void prepare_step(int t);

    /// Checks the selection (ids in range, no duplicates: throws Error naming `method`), computes the
    /// approximate output for each query head and fills `out[g]` for g in [0, group).
    /// Returns the measured time of the approximate attention for the whole group, in microseconds.
    double evaluate(const Selection& sel, const std::string& method, std::vector<QueryMetrics>& out);

    /// The same metrics for an approximate output computed elsewhere (the CUDA backend, docs/cuda.md):
    /// recall, mass, exact_frac and est_frac from `sel` (checked as above), out_err, out_cos and lse_err
    /// from out: [group, d] and lse: [group] (-inf = empty).
    void evaluate_output(const Selection& sel, const std::string& method, const float* out, const float* lse,
                         std::vector<QueryMetrics>& qm);

    const HeadReference& reference(int g) const { return ref_[(size_t)g]; }
    int visible() const { return n_; }

  private:
    void check_selection(const Selection& sel, const std::string& method);
    /// Metrics of group member g from the selection and its approximate output approx: [d], lse.
    void score(const Selection& sel, int g, const float* approx, double lse, QueryMetrics& m) const;

    const HeadSlice& s_;
    std::vector<int> recall_k_;
    std::vector<HeadReference> ref_;
    int t_ = -1;
    int n_ = 0;
    float scale_ = 1.0f;
    SelectionCheckScratch check_scratch_;
    std::vector<float> scores_, weights_, out_;  ///< [group, n], [group, n], [group, d]
    std::vector<double> lse_;                    ///< [group]
    std::vector<float> queries_;                 ///< [group, d] of step t_
    GroupScratch scratch_;
};

}  // namespace retro
