#pragma once
// Recall vs. scanned fraction of a FAISS index over one head's prompt keys, searched with the decode
// queries (query -> key, out of distribution) and with sampled prompt keys as queries (key -> key, in
// distribution): RetrievalAttention Fig. 3a / Fig. 6. The index is built once and replayed at every
// search setting (IVF nprobe, HNSW efSearch). An analysis of the FAISS indexes the faiss_* methods use, not
// a method: analysis/ood_recall_run.hpp runs it over a trace (`retro-bench ood-recall`, and `retro-bench
// run` on an ood-recall config); docs/methods/faiss.md.
#include <string>
#include <vector>

#include "methods/faiss_methods.hpp"
#include "trace/trace.hpp"

namespace retro {

struct OodRecallParams {
    AnnParams index;             ///< kind, MIPS mode, nlist, HNSW M / efConstruction
    std::vector<int> nprobe;     ///< IVF settings replayed (empty: {1}); ignored by other kinds
    std::vector<int> ef_search;  ///< HNSW settings replayed (empty: {16}); ignored by other kinds
    int k = 100;                 ///< recall@k against the exact inner-product top-k
    bool decode_queries = true;  ///< search with every decode query of the group
    int key_queries = 256;       ///< prompt keys sampled as queries (0 = none)
    unsigned seed = 1;           ///< key sampling
};

/// One search setting, averaged over the queries of each source (NaN when the source is off).
struct OodRecallPoint {
    std::string setting;  ///< "nprobe=8", "ef=64", "flat"
    int value = 0;        ///< the nprobe / efSearch value (0 for flat)
    double scanned_decode = 0, recall_decode = 0;  ///< scanned fraction (vectors compared / keys), recall@k
    double scanned_keys = 0, recall_keys = 0;
};

struct OodRecallResult {
    int n_keys = 0;           ///< prompt keys indexed
    int n_decode = 0;         ///< decode queries searched
    int n_key_queries = 0;    ///< key queries searched
    int nlist = 0;            ///< IVF lists built
    double build_ms = 0;      ///< index build wall time
    std::vector<OodRecallPoint> points;
};

/// Builds the index over the slice's prompt keys [prompt_len, d] and measures recall@k and scanned
/// fraction for each setting.
/// - Decode queries: each of the group's num_steps queries searches the prompt keys (decode tokens are
///   not indexed); ground truth is the exact top-k of q.k over the prompt keys.
/// - Key queries: `key_queries` distinct prompt tokens drawn uniformly (seeded); the query is the
///   token's key, the token itself is excluded from both the ground truth and the results (the search
///   asks for k + 1 and drops it), so a key does not find itself.
/// Recall counts returned ids whose score reaches the k-th exact score (ties count, capped at k), as the
/// harness's recall@k. The scanned fraction is AnnIndex::search's count (IVF: centroids + probed list
/// entries; HNSW: distance evaluations) divided by the number of keys.
/// Throws ParamError when the slice has no prompt keys or k < 1.
OodRecallResult ood_recall(const HeadSlice& slice, const OodRecallParams& p);

}  // namespace retro
