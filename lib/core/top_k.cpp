#include "core/top_k.hpp"

#include <algorithm>
#include <functional>
#include <numeric>

namespace retro {

void top_k_into(const float* v, int n, int k, std::vector<int32_t>& out, TopKScratch& s) {
    k = std::max(0, std::min(k, n));
    out.clear();
    if (k == 0) return;
    const auto better = [v](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
    if (k == n) {
        out.resize((size_t)n);
        std::iota(out.begin(), out.end(), 0);
    } else if ((size_t)k * 16 <= (size_t)n) {
        // Few out of many: a heap of the k best so far, ordered by `better` so the worst is on top; most
        // values lose one compare against the top (a later index never beats an equal value: ties keep
        // the lower index).
        out.resize((size_t)k);
        std::iota(out.begin(), out.end(), 0);
        std::make_heap(out.begin(), out.end(), better);
        float top = v[out.front()];
        for (int i = k; i < n; ++i) {
            if (!(v[i] > top)) continue;
            std::pop_heap(out.begin(), out.end(), better);
            out.back() = i;
            std::push_heap(out.begin(), out.end(), better);
            top = v[out.front()];
        }
    } else {
        // t = the k-th largest value: fewer than k values exceed it, at least k reach it; the set is
        // every index above t and the lowest-indexed ones equal to it.
        s.vals.assign(v, v + n);
        std::nth_element(s.vals.begin(), s.vals.begin() + (k - 1), s.vals.end(), std::greater<float>());
        const float t = s.vals[(size_t)(k - 1)];
        out.reserve((size_t)k);
        s.ties.clear();
        for (int i = 0; i < n; ++i) {
            if (v[i] > t)
                out.push_back(i);
            else if (v[i] == t)
                s.ties.push_back(i);
        }
        out.insert(out.end(), s.ties.begin(), s.ties.begin() + (k - (int)out.size()));
    }
    std::sort(out.begin(), out.end(), better);
}

std::vector<int32_t> top_k_indices(const float* v, int n, int k) {
    std::vector<int32_t> out;
    TopKScratch s;
    top_k_into(v, n, k, out, s);
    return out;
}

}  // namespace retro
