#include "methods/wave_head.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace retro {

int wave_clusters_for(double b, int m, bool at_least_one) {
    if (b <= 0 || m <= 0) return 0;
    if (b >= 1) return (int)std::min<long>(std::lround(b), m);
    long c = std::lround(b * m);
    if (at_least_one) c = std::max(1L, c);
    return (int)std::min<long>(c, m);
}

WaveHead::WaveHead(const WaveParams& p, int layer, int kv_head, KMeansFn kmeans)
    : p_(p), layer_(layer), kv_head_(kv_head), kmeans_(std::move(kmeans)) {}

void WaveHead::build(const KVView& prompt) {
    index_ = WaveIndex(prompt.d);
    nonempty_.clear();
    idx_end_ = p_.sink;
    const int mid_end = prompt.n - p_.window;
    const int mid = mid_end - p_.sink;
    if (mid > 0 && mid >= std::max(1, p_.update_segment)) {
        KMeansParams kp = kmeans_params();
        kp.segment = p_.segment;
        add_block(prompt, p_.sink, mid_end, kp);
    }
}

bool WaveHead::append(const KVView& kv, int pos) {
    if (p_.update_segment <= 0) return false;
    bool grew = false;
    // Tokens older than the window (the current token excluded) that are not indexed yet: every
    // update_segment of them becomes new clusters (public code: _update_kv_cache).
    while ((pos - p_.window) - idx_end_ >= p_.update_segment) {
        KMeansParams kp = kmeans_params();
        kp.segment = 0;  // one segment per update
        kp.k = std::max(1, (int)std::lround(p_.update_segment / p_.tokens_per_cluster));
        add_block(kv, idx_end_, idx_end_ + p_.update_segment, kp);
        grew = true;
    }
    return grew;
}

WaveHead::Zones WaveHead::zones() const {
    const int m = index_.num_clusters(), ne = (int)nonempty_.size();
    if (m == 0) return {};
    const int r = std::min(wave_clusters_for(p_.retrieval, m, true), ne);
    return {r, std::min(wave_clusters_for(p_.estimation, m, false), ne - r)};
}

WaveHead::Zones WaveHead::budget() const {
    const int m = index_.num_clusters();
    if (m == 0) return {};
    const int R = wave_clusters_for(p_.retrieval, m, true);
    return {R, std::min(wave_clusters_for(p_.estimation, m, false), m - R)};
}

void WaveHead::steady_ids(int n, std::vector<int32_t>& out) const {
    const int s_end = std::min(p_.sink, n);
    for (int i = 0; i < s_end; ++i) out.push_back(i);
    for (int i = std::max(idx_end_, s_end); i < n; ++i) out.push_back(i);
}

int WaveHead::steady_tokens(int n) const {
    const int s_end = std::min(p_.sink, n);
    return s_end + std::max(0, n - std::max(idx_end_, s_end));
}

void WaveHead::fill_selection(std::span<const int> order, int n, int group, double kv_token_bytes,
                              Selection& out) const {
    auto& ids = out.shared();
    ids.clear();
    steady_ids(n, ids);
    const int m = index_.num_clusters();
    out.scan_ops = (double)m * group;
    out.h2d_bytes = 0;
    out.d2h_bytes = 0;
    if (m == 0) return;
    const Zones z = zones();
    if (z.r + z.e == 0) {
        out.scan_ops = 0;
        return;
    }
    // Retrieval zone: every token of the top r clusters, exact.
    size_t retrieved = 0;
    for (int i = 0; i < z.r; ++i) {
        const auto mem = index_.members(order[(size_t)i]);
        ids.insert(ids.end(), mem.begin(), mem.end());
        retrieved += mem.size();
    }
    // Estimation zone: the next e clusters from centroid, size and value sum (Eq. 2-4).
    out.estimated.reserve((size_t)z.e);
    for (int i = z.r; i < z.r + z.e; ++i) {
        const int c = order[(size_t)i];
        out.estimated.push_back({index_.centroid(c), (double)index_.size(c), index_.value_sum(c)});
    }
    // Retrieval-zone KV comes from CPU memory (no GPU block cache here: the system model adds it); the
    // cluster ids go the other way to the CPU buffer manager (int64 each, as the public code's copy).
    out.h2d_bytes = (double)retrieved * kv_token_bytes;
    for (int i = 0; i < z.r; ++i) {  // transfer units for the GPU block cache, rank order
        out.fetch_units.push_back(order[(size_t)i]);
        out.fetch_unit_tokens.push_back(index_.size(order[(size_t)i]));
    }
    out.d2h_bytes = (double)z.r * 8.0;
}

Footprint WaveHead::footprint(int n, int head_dim, double elem_bytes) const {
    const double m = index_.num_clusters();
    Footprint f;
    // steady-zone KV + meta index (centroid, value sum, size per cluster, in the KV dtype as the public
    // code stores them)
    f.gpu_bytes = steady_tokens(n) * 2.0 * head_dim * elem_bytes + m * (2.0 * head_dim + 1.0) * elem_bytes;
    // CPU-side descriptor per cluster (start offset, size) for the reorganized KV blocks
    f.cpu_bytes = m * 12.0;
    return f;
}

KMeansParams WaveHead::kmeans_params() const {
    KMeansParams kp;
    kp.tokens_per_cluster = p_.tokens_per_cluster;
    kp.iters = p_.iters;
    kp.center = p_.center_keys;
    kp.final_assign = p_.final_assign;
    kp.final_radius = p_.final_radius;
    kp.final_lists = p_.final_lists;
    kp.final_probe = p_.final_probe;
    kp.normalize_init = p_.normalize_init;
    if (p_.seed != 0) {
        unsigned s = p_.seed * 2654435761u;
        s ^= (unsigned)layer_ * 40503u + (unsigned)kv_head_ * 9176u + (unsigned)index_.blocks().size() * 65599u;
        kp.seed = s == 0 ? 1u : s;
    }
    return kp;
}

void WaveHead::add_block(const KVView& kv, int begin, int end, const KMeansParams& kp) {
    const WaveIndexBlock& b =
        kmeans_ ? index_.append(kmeans_(kv.keys + (size_t)begin * kv.d, end - begin, kv.d, kp), kv.values, begin)
                : index_.add_block(kv.keys, kv.values, kv.d, begin, end, kp);
    for (int c = b.cluster_begin; c < b.cluster_end; ++c)
        if (index_.size(c) > 0) nonempty_.push_back(c);
    idx_end_ = end;
}

}  // namespace retro
