// The methods' shared budget and fetch-order helpers (methods/method.hpp), JSON-free: the RETRO_GPU_ONLY
// reference library links them with the PQ head (methods/pq_head.cpp).
#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "methods/method.hpp"

namespace retro {

int resolve_budget(double b, int n) {
    long k = b >= 1.0 ? std::lround(b) : std::max(1L, std::lround(b * n));
    return (int)std::clamp(k, 0L, (long)n);
}

void append_interleaved_unique(const std::vector<std::vector<int32_t>>& lists, std::vector<int32_t>& out) {
    std::unordered_set<int32_t> seen(out.begin(), out.end());
    for (size_t r = 0, more = 1; more; ++r) {
        more = 0;
        for (const auto& l : lists)
            if (r < l.size()) {
                more = 1;
                if (seen.insert(l[r]).second) out.push_back(l[r]);
            }
    }
}

}  // namespace retro
