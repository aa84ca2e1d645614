#pragma once
// What a Python method's select() returns, turned into a Selection and checked the way the evaluator
// would refuse it (ids in [0, n), no duplicate in a list, shapes, finite values) but with the reason
// spelt out, so the adapter can name the file, class, layer, head and step.
//
// select() returns either the exact ids alone or a dict (docs/adding-a-method.md):
//   exact: ids attended exactly: int array [k] (shared by the group), [group, k], or a list of `group`
//          int arrays (one per query head, lengths may differ)
//   log_weights: float array(s) parallel to exact (same structure and lengths); optional
//   estimated: {"centroids": [c, d], "sizes": [c], "value_sums": [c, d]}; optional
//   scan_ops, h2d_bytes, d2h_bytes: numbers >= 0 (default 0)
//   fetch_tokens: int array of token ids; or fetch_units: int array with fetch_unit_tokens (same length)
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "methods/method.hpp"

namespace retro::pym {

namespace py = pybind11;

/// A returned value the harness refuses; the message says what and why (the adapter adds who).
struct BadReturn : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// Owns the estimated clusters' arrays that Selection::estimated points into (valid until the next call).
struct EstimatedStore {
    std::vector<float> centroids;   ///< [c, d]
    std::vector<float> value_sums;  ///< [c, d]
};

/// Fills `out` (cleared first) from `r` for a group of `group` query heads of dimension d with n visible
/// tokens. Throws BadReturn. Hold the GIL.
void to_selection(const py::handle& r, int group, int d, int n, Selection& out, EstimatedStore& store);

}  // namespace retro::pym
