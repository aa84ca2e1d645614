// Quest's page selection as plain functions (quest_pages.hpp).
#include "methods/quest_pages.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace retro {

float quest_page_bound(const float* q, const float* mn, const float* mx, int d) {
    float s = 0.0f;
    for (int e = 0; e < d; ++e) s += std::max(q[e] * mx[e], q[e] * mn[e]);
    return s;
}

int quest_budget_pages(double k, int n, int page) {
    // the budget is not clamped to n: a budget of at least n tokens, rounded up to whole pages, is dense
    const double tokens = k >= 1 ? std::round(k) : std::max(1.0, std::round(k * n));
    return (int)std::clamp(std::floor(tokens / page), 1.0, 1e9);
}

void quest_top_pages(const float* s, int m, int r, std::vector<int>& sel) {
    sel.resize((size_t)std::max(0, m));
    std::iota(sel.begin(), sel.end(), 0);
    r = std::clamp(r, 0, std::max(0, m));
    if (r < m)
        std::nth_element(sel.begin(), sel.begin() + r, sel.end(),
                         [&](int a, int b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
    sel.resize((size_t)r);
    std::sort(sel.begin(), sel.end());
}

}  // namespace retro
