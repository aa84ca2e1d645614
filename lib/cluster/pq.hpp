#pragma once
// Product quantizer (Jégou et al. 2011) as PQCache uses it for keys (Zhang et al., SIGMOD 2025, §3.2):
// the d dimensions are split into m contiguous sub-spaces of d/m dimensions, each clustered by its own
// L2 k-means into 2^b centroids; a vector's code is its nearest centroid in every sub-space. Scoring is
// asymmetric: for a query q the lookup table LUT[j][c] = q_j · C_j[c] (q_j the query's j-th sub-vector)
// gives q · k̂ = Σ_j LUT[j][code_j(k)], the inner product with the key's reconstruction.
//
// k-means per sub-space: `iters` Lloyd iterations (assignment by L2 through a BLAS GEMM,
// ||x||² − 2x·c + ||c||², then means), initial centroids = 2^b distinct training rows drawn with the seed
// (as FAISS's random init), an empty cluster re-seeded with the row farthest from its centroid. With
// n ≤ 2^b training rows every row becomes its own centroid (the rest repeat row 0), so the
// reconstruction is exact.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace retro {

struct PQParams {
    int m = 2;          ///< sub-spaces; must divide d (PQCache default m = 2, b = 6)
    int nbits = 6;      ///< bits per code: 2^nbits centroids per sub-space, 1..16
    int iters = 10;     ///< Lloyd iterations (assignment + update); >= 1
    unsigned seed = 1;  ///< initial-centroid draw
};

class ProductQuantizer {
  public:
    ProductQuantizer() = default;
    /// Throws ParamError when m does not divide d or a parameter is out of range.
    ProductQuantizer(int d, const PQParams& p);
    /// The constructor's parameter checks alone (m divides d, nbits, iters): throws ParamError.
    static void check(int d, const PQParams& p);

    /// Fits the codebooks on rows x: [n, d] (n >= 1).
    void train(const float* x, int n);

    /// codes: [n, m], the nearest centroid of each sub-vector of rows x: [n, d].
    void encode(const float* x, int n, uint16_t* codes) const;

    /// rows: [n, d] reconstructions of codes: [n, m].
    void decode(const uint16_t* codes, int n, float* rows) const;

    /// lut: [m, ksub], LUT[j][c] = q_j · C_j[c] for a query q: [d].
    void inner_product_table(const float* q, float* lut) const;

    int d() const { return d_; }
    int m() const { return p_.m; }
    int dsub() const { return dsub_; }
    int ksub() const { return ksub_; }
    int nbits() const { return p_.nbits; }
    /// centroids of sub-space j: [ksub, dsub]
    const float* centroids(int j) const { return centroids_.data() + (std::size_t)j * ksub_ * dsub_; }

  private:
    PQParams p_;
    int d_ = 0, dsub_ = 0, ksub_ = 0;
    std::vector<float> centroids_;  ///< [m, ksub, dsub]
};

/// Index of the nearest (L2) centroid for each row: rows x: [n, dsub] (row stride `ldx`), centroids
/// c: [k, dsub]; ties to the lowest index. GEMM-based, the building block of train and encode.
void nearest_centroids_l2(const float* x, int n, int ldx, const float* c, int k, int dsub, int32_t* out,
                          float* dist2 = nullptr);

}  // namespace retro
