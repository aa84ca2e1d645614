#pragma once
// `quest`: Quest's query-aware page selection (Tang et al., ICML 2024; public code mit-han-lab/Quest).
// Pages of `page_size` consecutive tokens keep per-channel min and max keys; a page's score is the upper
// bound sum_e max(q_e * max_e, q_e * min_e) of q.k over its tokens; the top pages under a token budget
// are attended, the last (partial) page always. docs/methods/quest.md.
#include "methods/params.hpp"
#include "methods/quest_pages.hpp"  // quest_page_bound, quest_budget_pages, quest_top_pages
