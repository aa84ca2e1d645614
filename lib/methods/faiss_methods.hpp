#pragma once
// FAISS baselines (RetrievalAttention §4.1 "Flat" and "IVF", plus HNSW from its Fig. 3a): the prompt keys
// outside a static pattern (sink + window) go into a FAISS index searched by inner product; each query
// head retrieves its top-k, attended exactly together with the static pattern. docs/methods/faiss.md.
//
// AnnIndex is the index wrapper shared by the methods and by the ood_recall analysis
// (lib/analysis/ood_recall.hpp): one FAISS index over a set of keys, searched one query at a time, that
// reports how many vectors each search compared (centroids and list entries for IVF, every distance
// evaluation for HNSW).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "methods/params.hpp"

namespace retro {

enum class AnnKind { flat, ivf, hnsw };

/// How maximum inner product search is posed to FAISS.
enum class MipsMode {
    ip,            ///< FAISS's METRIC_INNER_PRODUCT directly
    l2_transform,  ///< keys get an extra coordinate sqrt(M^2 - |k|^2) (M = max key norm at build), queries 0;
                   ///< L2 search on the augmented vectors ranks exactly by inner product
};

AnnKind parse_ann_kind(const std::string& s);  ///< "flat" | "ivf" | "hnsw"; throws ParamError
MipsMode parse_mips(const std::string& s);      ///< "ip" | "l2_transform"; throws ParamError
const char* ann_kind_name(AnnKind k);
const char* mips_name(MipsMode m);

struct AnnParams {
    AnnKind kind = AnnKind::flat;
    MipsMode mips = MipsMode::ip;
    int nlist = 512;           ///< IVF lists (clamped to the number of keys at build)
    int hnsw_m = 32;           ///< HNSW neighbours per node (FAISS IndexHNSWFlat default)
    int ef_construction = 40;  ///< HNSW build beam (FAISS default)
    int threads = 0;           ///< OpenMP threads for the build; 0 = min(OpenBLAS threads, OpenMP threads)
};

/// Search-time knobs (ignored by index kinds they do not apply to).
struct AnnSearch {
    int nprobe = 1;     ///< IVF lists probed (clamped to nlist)
    int ef_search = 16; ///< HNSW beam (FAISS 1.7.3: the candidate queue holds max(ef_search, k), but the
                        ///< search stops after ef_search closer candidates, so ef_search < k returns fewer)
};

/// A FAISS index over keys [n, d] with caller-chosen int32 ids. Not thread-safe; one per head.
class AnnIndex {
  public:
    AnnIndex(int d, const AnnParams& p);
    ~AnnIndex();
    AnnIndex(AnnIndex&&) noexcept;
    AnnIndex& operator=(AnnIndex&&) noexcept;
    /// A deep copy (faiss::clone_index: an IVF copy owns a copy of its coarse quantizer).
    AnnIndex(const AnnIndex& o);
    AnnIndex& operator=(const AnnIndex& o);

    /// Builds (IVF: trains the coarse quantizer on these keys) over keys [n, d] with ids [n]. The
    /// l2_transform's max norm M is fixed here. n = 0 leaves the index empty (searches return nothing).
    void build(const float* keys, const int32_t* ids, int n);
    /// Adds one key [d] with id. Under l2_transform a key with |k| > M gets extra coordinate 0.
    /// Adding to an index built over 0 keys builds it over this one key.
    void add(const float* key, int32_t id);

    /// Top-k ids by inner product with q [d] (fewer when the index holds fewer or the search finds fewer),
    /// best first. Returns the number of vectors compared: flat n; IVF nlist centroids + the entries of
    /// the probed lists (FAISS's own per-call IndexIVFStats); HNSW every distance evaluation.
    double search(const float* q, int k, const AnnSearch& s, std::vector<int32_t>& out);

    int size() const { return (int)ids_.size(); }
    int dim() const { return d_; }
    int nlist() const;  ///< IVF lists actually built (0 for other kinds)
    /// CPU bytes the index keeps beyond the keys themselves (centroids, list ids, graph links, the
    /// l2_transform's extra coordinate).
    double overhead_bytes() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    int d_ = 0;
    std::vector<int32_t> ids_;  ///< FAISS id (insertion order) -> caller id
};

}  // namespace retro
