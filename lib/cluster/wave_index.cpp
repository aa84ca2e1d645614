#include "cluster/wave_index.hpp"

#include <string>

#include "core/error.hpp"

namespace retro {

const WaveIndexBlock& WaveIndex::add_block(const float* keys, const float* values, int d, int begin,
                                           int end, const KMeansParams& p) {
    if (d_ == 0) d_ = d;
    if (d != d_)
        throw ParamError("wave index: head_dim " + std::to_string(d) + " differs from the index's " +
                         std::to_string(d_));
    if (begin < 0 || end <= begin)
        throw ParamError("wave index: empty token range [" + std::to_string(begin) + ", " +
                         std::to_string(end) + ")");
    const KMeansResult r = segmented_kmeans(keys + (size_t)begin * d, end - begin, d, p);
    return append(r, values, begin);
}

const WaveIndexBlock& WaveIndex::append(const KMeansResult& r, const float* values, int begin) {
    if (d_ == 0) d_ = r.d;
    if (r.d != d_)
        throw ParamError("wave index: head_dim " + std::to_string(r.d) + " differs from the index's " +
                         std::to_string(d_));
    const int base = num_clusters(), K = r.k, d = d_;
    WaveIndexBlock b;
    b.token_begin = begin;
    b.token_end = begin + r.n;
    b.cluster_begin = base;
    b.cluster_end = base + K;
    b.segments = r.plan.segments();

    centroids_.insert(centroids_.end(), r.centroids.begin(), r.centroids.end());
    sizes_.insert(sizes_.end(), r.sizes.begin(), r.sizes.end());
    // Member lists by counting sort (tokens ascending within a cluster) and value sums in float64.
    const int64_t off0 = offsets_.back();
    std::vector<int64_t> pos((size_t)K);
    int64_t o = off0;
    for (int j = 0; j < K; ++j) {
        pos[(size_t)j] = o;
        o += r.sizes[(size_t)j];
        offsets_.push_back(o);
        if (r.sizes[(size_t)j] > 0) ++nonempty_;
    }
    members_.resize((size_t)o);
    std::vector<double> vs((size_t)K * d, 0.0);
    for (int i = 0; i < r.n; ++i) {
        const int j = r.assign[(size_t)i];
        members_[(size_t)pos[(size_t)j]++] = begin + i;
        const float* v = values + (size_t)(begin + i) * d;
        double* acc = vs.data() + (size_t)j * d;
        for (int e = 0; e < d; ++e) acc[e] += v[e];
    }
    value_sums_.reserve(value_sums_.size() + vs.size());
    for (double x : vs) value_sums_.push_back((float)x);
    blocks_.push_back(b);
    return blocks_.back();
}

}  // namespace retro
