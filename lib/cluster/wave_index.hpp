#pragma once
// RetroInfer's wave index storage (§4.2 "Index Organization"): a meta index (per cluster the centroid,
// the size and the sum of the member values, GPU-resident in the real system) over cluster member lists
// laid out contiguously, cluster after cluster (the order of the CPU-side KV blocks). Tokens are
// clustered in blocks of contiguous positions — the prompt at build time, then each decode-time update
// segment — and every block appends its clusters after the existing ones, never touching them.
#include <cstdint>
#include <span>
#include <vector>

#include "cluster/kmeans.hpp"

namespace retro {

/// One clustering: tokens [token_begin, token_end) became clusters [cluster_begin, cluster_end).
struct WaveIndexBlock {
    int token_begin = 0, token_end = 0;
    int cluster_begin = 0, cluster_end = 0;
    int segments = 1;  ///< k-means segments used for this block
};

class WaveIndex {
  public:
    explicit WaveIndex(int d = 0) : d_(d) {}

    /// Clusters tokens [begin, end) of keys/values ([>= end, d] row-major) with `p` and appends the
    /// clusters. Returns the new block. Throws ParamError when the range is empty or d mismatches.
    const WaveIndexBlock& add_block(const float* keys, const float* values, int d, int begin, int end,
                                    const KMeansParams& p);

    /// Appends the clusters of a k-means already run over tokens [begin, begin + r.n) (row i = token
    /// begin + i); values: [>= begin + r.n, d]. Value sums are accumulated in float64.
    const WaveIndexBlock& append(const KMeansResult& r, const float* values, int begin);

    int d() const { return d_; }
    int num_clusters() const { return (int)sizes_.size(); }
    int num_tokens() const { return (int)members_.size(); }
    int num_nonempty() const { return nonempty_; }
    const std::vector<WaveIndexBlock>& blocks() const { return blocks_; }

    const float* centroid(int c) const { return centroids_.data() + (size_t)c * d_; }
    const float* value_sum(int c) const { return value_sums_.data() + (size_t)c * d_; }
    int size(int c) const { return sizes_[(size_t)c]; }
    /// Token ids of cluster c, ascending (a contiguous slice of the member array).
    std::span<const int32_t> members(int c) const {
        return {members_.data() + offsets_[(size_t)c], (size_t)sizes_[(size_t)c]};
    }

    const std::vector<float>& centroids() const { return centroids_; }    ///< [m, d]
    const std::vector<float>& value_sums() const { return value_sums_; }  ///< [m, d]
    const std::vector<int32_t>& sizes() const { return sizes_; }          ///< [m]
    const std::vector<int64_t>& offsets() const { return offsets_; }      ///< [m + 1] into members
    const std::vector<int32_t>& member_array() const { return members_; }  ///< [num_tokens]

  private:
    int d_ = 0;
    std::vector<float> centroids_;
    std::vector<float> value_sums_;
    std::vector<int32_t> sizes_;
    std::vector<int64_t> offsets_ = {0};
    std::vector<int32_t> members_;
    std::vector<WaveIndexBlock> blocks_;
    int nonempty_ = 0;
};

}  // namespace retro
