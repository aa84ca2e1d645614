#pragma once
// The approximate attention output a Selection stands for, and the check that a Selection is valid: the
// one place both are computed, shared by the evaluator (metrics/evaluator) and the Python binding
// (python/, docs/python.md), so what Python sees is exactly what the metrics score.
#include <cstdint>
#include <string>
#include <vector>

#include "attention/group_attention.hpp"
#include "methods/method.hpp"

namespace retro {

/// Outputs of the group's queries [group, d] under `sel` over the visible tokens kv (keys/values
/// [kv.n, d]): each member's exact tokens (with their log weights, if any; one pass over the union of the
/// lists, attention/group_attention) merged with every estimated cluster (attention/attention.hpp).
/// Writes out: [group, d] and lse: [group] (-inf where nothing was selected).
void selection_outputs(const float* queries, const KVView& kv, const Selection& sel, int group, float scale,
                       float* out, double* lse, GroupScratch& scratch);

/// Reusable scratch of check_selection (duplicate detection without clearing n entries per list).
struct SelectionCheckScratch {
    std::vector<uint32_t> stamp;  ///< stamp[i] == gen means token i was seen in the current list
    uint32_t gen = 0;
};

/// Throws Error naming `method` and `step` unless `sel` has 0, 1 or `group` exact lists, log-weight
/// lists parallel to them with finite values, and ids in [0, n) unique within each list.
void check_selection(const Selection& sel, const std::string& method, int group, int n, int step,
                     SelectionCheckScratch& scratch);

}  // namespace retro
