#pragma once
// SimHash LSH tables (MagicPIG; public code Infini-AI-Lab/MagicPIG @ac9aa36, models/attnserver.py and
// library/lsh): L tables of K random-hyperplane bits each. A vector's code in table t is the K sign bits
// of x . w_{t,j} for Gaussian hyperplanes w [d]; table t holds every base vector sorted by its code, so a
// query's bucket is an equal range. For a query q and a vector k at angle theta, one bit agrees with
// probability 1 - theta/pi, so the two collide in a table with probability x = (1 - theta/pi)^K,
// independently across tables.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace retro {

struct SimHashParams {
    int K = 10;         ///< bits per table (0..30; 0 = every vector collides everywhere)
    int L = 150;        ///< tables (>= 1)
    uint64_t seed = 0;  ///< seed of the Gaussian hyperplanes
};

class SimHashTables {
  public:
    /// Hashes base vectors x [n, d] (row-major float32). Throws ParamError naming K or L.
    void build(const float* x, int n, int d, const SimHashParams& p);

    int n() const { return n_; }
    int K() const { return p_.K; }
    int L() const { return p_.L; }
    int d() const { return d_; }
    /// The hyperplanes [d, K*L] (row-major: column t*K + j is hyperplane j of table t), as codes() reads them.
    const float* planes() const { return planes_.data(); }

    /// codes [L] of vector v [d]: bit j of table t is (sum over e = 0..d-1, in that order, of v[e] * w_{t,j}[e],
    /// float, from 0, each product and sum rounded on its own) > 0 — the GPU twin's query hashing
    /// (kernels/magicpig) sums the same way, bit for bit.
    void codes(const float* v, uint32_t* codes) const;

    /// For every base vector, the number of tables in which it shares q's bucket (codes [L]): adds 1 to
    /// count[i] per colliding table and lists each id whose count went from 0 to 1 in `touched`.
    /// count must be sized n and zero on the touched entries. Returns the bucket entries visited.
    size_t collide(const uint32_t* codes, std::vector<uint32_t>& count, std::vector<int32_t>& touched) const;

    /// Bytes of the tables as the public code stores them (int16 codes when K <= 16, else int32, and
    /// int32 ids, per table and vector).
    double table_bytes() const;

  private:
    SimHashParams p_;
    int n_ = 0, d_ = 0;
    std::vector<float> planes_;                  ///< [d, K*L]: column t*K + j is hyperplane j of table t
    std::vector<std::vector<uint32_t>> codes_;   ///< [L][n] sorted codes
    std::vector<std::vector<int32_t>> ids_;      ///< [L][n] ids in code order
};

/// Probability that a vector at cosine `cos_angle` to the query collides with it in at least
/// `min_collisions` of L tables of K bits: P(Binomial(L, x) >= m), x = (1 - acos(cos)/pi)^K. Accurate
/// for tiny probabilities (sums the upper tail directly when the complement would cancel).
double simhash_sample_probability(double cos_angle, int K, int L, int min_collisions);

}  // namespace retro
