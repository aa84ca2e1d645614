#pragma once
// Attention statistics of a trace (what `retro-bench inspect` reports, docs/inspect.md): how sparse
// each query head's exact attention is, how stable its top tokens are from step to step, how far the
// queries lie from the key distribution (RetrievalAttention's OOD measure), and how much mass goes to
// the sink and local tokens. Plain structs; the library never prints.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "core/top_k.hpp"  // top_k_indices (was declared here)
#include "trace/trace.hpp"

namespace retro {

struct StatsOptions {
    int step_stride = 1;    ///< use decode steps 0, s, 2s, ...
    int sink_tokens = 4;    ///< sink mass = mass on tokens [0, sink_tokens)
    int local_tokens = 64;  ///< local mass = mass on the last local_tokens visible tokens
    int top_mass_k = 1000;  ///< top_mass = mass of the top-k tokens (RetrievalAttention's "recovery ratio")
    double top_frac = 0.01;  ///< top_frac_mass = mass of the top ceil(top_frac * visible) tokens
    int overlap_k = 100;    ///< overlap of the top-k between consecutive decode steps
    double ridge = 1e-3;    ///< covariance ridge, in units of trace(cov)/d
    bool mahalanobis = true;  ///< compute the query/key Mahalanobis ratio (needs >= 2 prompt keys)
    int locality_near = 1;   ///< key positional locality: centered-key cosine at this distance (tokens)
    int locality_far = 64;   ///< ... and at this one

    void validate() const;  ///< throws ParamError
};

/// Statistics of one query head, averaged over the chosen decode steps. NaN where undefined (e.g.
/// overlap with a single decode step).
struct QHeadStats {
    int layer = 0;
    int kv_head = 0;
    int q_head = 0;  ///< global query-head index
    int steps = 0;   ///< decode steps averaged
    double n50 = 0, n90 = 0, n99 = 0;  ///< tokens needed for 50/90/99% of the attention mass
    double f50 = 0, f90 = 0, f99 = 0;  ///< the same as fractions of the visible tokens
    double top_mass = 0;     ///< mass of the top-k tokens (k = top_mass_k)
    double static_top_mass = 0;  ///< mass at later steps of the first chosen step's top-k (reused set)
    double top_frac_mass = 0;    ///< mass of the top top_frac of the visible tokens (length-independent)
    double static_top_frac_mass = 0;  ///< mass at later steps of the first chosen step's top top_frac
    double overlap = 0;      ///< |top_k(t) ∩ top_k(t+1)| / k, k = overlap_k
    double query_cos = 0;    ///< cosine similarity of consecutive decode queries
    double sink_mass = 0;    ///< mass on the first sink_tokens tokens
    double local_mass = 0;   ///< mass on the last local_tokens visible tokens
    double q_mahal = 0;      ///< mean Mahalanobis distance of the decode queries from the prompt keys
    double k_mahal = 0;      ///< mean Mahalanobis distance of the prompt keys from their own distribution
    double ood_ratio = 0;    ///< q_mahal / k_mahal
    double key_mean_ratio = 0;  ///< |mean(keys)| / sqrt(trace(cov(keys))) of the KV head
    double key_cos_near = 0;  ///< mean cosine of centered prompt keys locality_near tokens apart (KV head)
    double key_cos_far = 0;   ///< the same at locality_far tokens (random pairs: ~0)
};

/// Every query head of a slice. Decode steps 0, stride, 2*stride, ...; the overlap also uses step t+1.
std::vector<QHeadStats> head_stats(const HeadSlice& s, const StatsOptions& opt = {});

/// Mean of each field over `v`, skipping NaN entries per field; layer/kv_head/q_head = -1 and steps
/// = the sum. An empty input gives NaN fields.
QHeadStats mean_stats(std::span<const QHeadStats> v);

nlohmann::json to_json(const QHeadStats& s);

// ---- building blocks (exposed for tests) -------------------------------------------------------------

struct MassCounts {
    int n50 = 0, n90 = 0, n99 = 0;
};

/// Smallest numbers of tokens whose largest weights reach 50/90/99% of sum(w). w: [n], >= 0.
MassCounts tokens_for_mass(const float* w, int n);

/// Sum of w over the k largest entries.
double top_k_mass(const float* w, int n, int k);

/// |a ∩ b| / k (a and b hold distinct ids; k = a.size() if k <= 0).
double set_overlap(std::span<const int32_t> a, std::span<const int32_t> b, int k = 0);

/// Positional locality of keys: for each distance dist in `dists`, the mean over i of
/// cos(k_i - mu, k_{i+dist} - mu) for i in [first, n - dist), mu the mean of keys [first, n). keys: [n, d].
/// NaN for a distance < 1 or >= n - first. Returns [dists.size()].
std::vector<double> centered_key_cosines(const float* keys, int n, int d, int first, std::span<const int> dists);

/// Gaussian fitted to a set of vectors: mean and the inverse Cholesky factor of (cov + ridge*trace/d*I).
class KeyDistribution {
  public:
    /// x: [n, d] row-major, n >= 2. Throws ParamError on bad sizes.
    KeyDistribution(const float* x, int n, int d, double ridge = 1e-3);
    /// Mahalanobis distance sqrt((y-mu)^T S^-1 (y-mu)) of each row of y [m, d]: out [m].
    void distances(const float* y, int m, double* out) const;
    double distance(const float* y) const;
    int dim() const { return d_; }
    const std::vector<double>& mean() const { return mean_; }
    double trace() const { return trace_; }  ///< trace of the covariance (without ridge)

  private:
    int d_;
    std::vector<double> mean_;
    std::vector<float> winv_;  ///< [d, d] L^-1, row-major (lower triangular)
    double trace_ = 0;
};

}  // namespace retro
