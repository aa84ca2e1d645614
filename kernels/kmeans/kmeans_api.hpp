#pragma once
// Host API of the segmented k-means kernels (kernels/cuda_api.hpp, docs/cuda.md): kmeans/kmeans.cu; CPU
// emulation kmeans/kmeans_emulation.cpp, checks kmeans/kmeans_checks.cpp, microbenchmark
// kmeans/kmeans_bench.cpp.
#include <cstdint>

#include "cluster/kmeans.hpp"

namespace retro::cuda {

// ---- segmented k-means (kmeans/kmeans.cu; CPU reference: lib/cluster/kmeans) ----

/// assign[i] = argmax_{j in [c_begin[seg(i)], c_end[seg(i)])} x_i . c_j (lowest j on ties), where row i
/// lies in segment seg(i) = the s with row_begin[s] <= i < row_begin[s+1], c_begin(s) =
/// cluster_begin[max(0, s - radius)] and c_end(s) = cluster_begin[min(S, s + radius + 1)]: radius 0 = own
/// segment, r = r neighbours either side, < 0 = all k centroids (kmeans_final_radius). d_x: [n, d] f32; d_c: [k, d] f32; d_row_begin, d_cluster_begin: [S + 1];
/// d_assign: [n] int32 out.
void kmeans_assign(const float* d_x, int n, int d, const float* d_c, int k, const int32_t* d_row_begin,
                   const int32_t* d_cluster_begin, int S, int radius, int32_t* d_assign,
                   void* stream = nullptr);

/// Segmented spherical k-means on the GPU with the CPU version's plan, initialisation (seed 0 only),
/// iterations and final un-normalized means: same contract as retro::segmented_kmeans. x: [n, d] host.
retro::KMeansResult segmented_kmeans_gpu(const float* x, int n, int d, const retro::KMeansParams& p);

}  // namespace retro::cuda
