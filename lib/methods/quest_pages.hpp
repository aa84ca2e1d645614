#pragma once
// Quest's page selection as plain functions (the method `quest`, lib/methods/quest.cpp, and its GPU twin's
// check, kernels/quest/quest_checks.cpp, both use them): the page bound, the page budget, the top pages.
// JSON-free, so the RETRO_GPU_ONLY reference library links it.
#include <vector>

namespace retro {

/// Quest's page score: sum over channels e of max(q[e] * mx[e], q[e] * mn[e]), in channel order; q, mn,
/// mx: [d]. An upper bound of q.k for every key k with mn <= k <= mx channel-wise. The GPU kernel
/// (kernels/quest/quest.cu) sums in the same order with the same max, so the two agree bit for bit.
float quest_page_bound(const float* q, const float* mn, const float* mx, int d);

/// Quest's page budget for n visible tokens: the token budget k (>= 1 tokens, or a fraction of n in
/// (0, 1)) over the page size, at least 1 (Quest's page_budget = token_budget // page_size; it includes
/// the last page).
int quest_budget_pages(double k, int n, int page);

/// sel <- the r pages with the largest scores among [0, m) (ties to the lower page), ascending;
/// scores: [m]. r is clamped to [0, m].
void quest_top_pages(const float* scores, int m, int r, std::vector<int>& sel);

}  // namespace retro
