#pragma once
// The summary table printed after a run (and by `retro-bench summary`): one row per run record.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace retro {

/// Columns: trace (when several), method, params, recall@100 (or the largest recall_k <= 100), mass,
/// out_err (mean and p90), exact_frac, h2d KB/step, select_us p50. Returns the table as text.
std::string summary_table(const std::vector<nlohmann::json>& records);

}  // namespace retro
