// FAISS baselines `faiss_flat`, `faiss_ivf`, `faiss_hnsw` (RetrievalAttention §4.1, Fig. 3a) and the
// AnnIndex wrapper. docs/methods/faiss.md has the algorithm as built, parameters, sources, deviations.
#include "methods/faiss_methods.hpp"

#include <cblas.h>
#include <faiss/IndexFlat.h>
#include <faiss/IndexHNSW.h>
#include <faiss/IndexIVFFlat.h>
#include <faiss/clone_index.h>
#include <faiss/impl/AuxIndexStructures.h>
#include <faiss/impl/DistanceComputer.h>
#include <faiss/impl/FaissException.h>
#include <faiss/utils/Heap.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "cluster/roargraph.hpp"  // dot_f32
#include "core/error.hpp"
#include "methods/builtin_methods.hpp"

namespace retro {

using faiss_idx = faiss::Index::idx_t;

AnnKind parse_ann_kind(const std::string& s) {
    if (s == "flat") return AnnKind::flat;
    if (s == "ivf") return AnnKind::ivf;
    if (s == "hnsw") return AnnKind::hnsw;
    throw ParamError("index kind '" + s + "': expected flat|ivf|hnsw");
}

MipsMode parse_mips(const std::string& s) {
    if (s == "ip") return MipsMode::ip;
    if (s == "l2_transform") return MipsMode::l2_transform;
    throw ParamError("mips '" + s + "': expected ip|l2_transform");
}

const char* ann_kind_name(AnnKind k) {
    return k == AnnKind::flat ? "flat" : k == AnnKind::ivf ? "ivf" : "hnsw";
}

const char* mips_name(MipsMode m) { return m == MipsMode::ip ? "ip" : "l2_transform"; }

namespace {

// OpenMP thread count of the calling thread for a scope (libgomp keeps it per thread, so the runner's
// workers do not affect each other).
class OmpThreads {
  public:
    explicit OmpThreads(int n) : prev_(omp_get_max_threads()) { omp_set_num_threads(std::max(1, n)); }
    ~OmpThreads() { omp_set_num_threads(prev_); }
    OmpThreads(const OmpThreads&) = delete;
    OmpThreads& operator=(const OmpThreads&) = delete;

  private:
    int prev_;
};

// HNSW minimizes; for inner product FAISS negates the storage's similarity (IndexHNSW.cpp does the same).
// Counts every distance evaluation of the search, the upper levels' greedy steps included.
struct CountingDistance final : faiss::DistanceComputer {
    faiss::DistanceComputer* base = nullptr;
    bool negate = false;
    size_t count = 0;
    void set_query(const float* x) override { base->set_query(x); }
    float operator()(idx_t i) override {
        ++count;
        const float v = (*base)(i);
        return negate ? -v : v;
    }
    float symmetric_dis(idx_t i, idx_t j) override {
        const float v = base->symmetric_dis(i, j);
        return negate ? -v : v;
    }
};

// The HNSW's flat storage with its distances computed here. Debian's libfaiss.a is built for the x86-64
// baseline, where FAISS 1.7.3's distances_simd.cpp falls back to fvec_inner_product_ref / fvec_L2sqr_ref:
// one dependent scalar add per coordinate. perf on the closed loop's 16K grid put 75% of its CPU time
// there, in the HNSW builds (the grid's largest cost: 1,651 s of a 32K case's ~3,600). dot_f32 keeps
// eight independent sums, which the compiler vectorizes at the baseline; the values are FAISS's up to
// the order of the additions. The search path takes the same computer (storage->get_distance_computer).
float l2sq_f32(const float* a, const float* b, int d) {
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int j = 0;
    for (; j + 8 <= d; j += 8)
        for (int u = 0; u < 8; ++u) {
            const float t = a[j + u] - b[j + u];
            s[u] += t * t;
        }
    for (; j < d; ++j) s[0] += (a[j] - b[j]) * (a[j] - b[j]);
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

struct VecFlatDistance final : faiss::FlatCodesDistanceComputer {
    const float* xb;
    int d;
    bool ip;
    const float* q = nullptr;
    explicit VecFlatDistance(const faiss::IndexFlat& s)
        : faiss::FlatCodesDistanceComputer(s.codes.data(), s.code_size), xb(s.get_xb()), d((int)s.d),
          ip(s.metric_type == faiss::METRIC_INNER_PRODUCT) {}
    float dis(const float* a, const float* b) const { return ip ? dot_f32(a, b, d) : l2sq_f32(a, b, d); }
    void set_query(const float* x) override { q = x; }
    float distance_to_code(const uint8_t* code) override { return dis(q, reinterpret_cast<const float*>(code)); }
    float symmetric_dis(idx_t i, idx_t j) override { return dis(xb + (size_t)i * d, xb + (size_t)j * d); }
};

struct VecFlat final : faiss::IndexFlat {
    VecFlat(idx_t d, faiss::MetricType m) : faiss::IndexFlat(d, m) {}
    faiss::FlatCodesDistanceComputer* get_FlatCodesDistanceComputer() const override {
        return new VecFlatDistance(*this);
    }
};

// An IndexHNSWFlat over a VecFlat storage holding `src`'s vectors (none: empty).
std::unique_ptr<faiss::IndexHNSWFlat> vec_hnsw(int d, int M, faiss::MetricType metric, const faiss::Index* src) {
    auto h = std::make_unique<faiss::IndexHNSWFlat>(d, M, metric);
    auto st = std::make_unique<VecFlat>(d, metric);
    if (src) {
        st->codes = static_cast<const faiss::IndexFlat&>(*src).codes;
        st->ntotal = src->ntotal;
    }
    delete h->storage;
    h->storage = st.release();
    h->own_fields = true;
    return h;
}

template <class F>
void faiss_call(const char* what, F&& f) {
    try {
        f();
    } catch (const faiss::FaissException& e) {
        throw Error(std::string("FAISS ") + what + ": " + e.what());
    }
}

}  // namespace

struct AnnIndex::Impl {
    AnnParams p;
    int dim = 0;             ///< d, or d + 1 under the l2_transform
    double max_norm2 = 0;    ///< l2_transform: M^2
    faiss::MetricType metric = faiss::METRIC_INNER_PRODUCT;
    std::unique_ptr<faiss::Index> quantizer;  ///< IVF coarse quantizer (declared first: outlives index)
    std::unique_ptr<faiss::Index> index;
    std::unique_ptr<faiss::VisitedTable> visited;  ///< HNSW
    std::vector<float> row, q;
    std::vector<float> dist, cdist;
    std::vector<faiss_idx> lab, assign;

    // Writes the FAISS vector of key [d] into out [dim].
    void transform_key(const float* k, int d, float* out) const {
        std::copy(k, k + d, out);
        if (dim == d) return;
        double n2 = 0;
        for (int e = 0; e < d; ++e) n2 += (double)k[e] * k[e];
        out[d] = (float)std::sqrt(std::max(0.0, max_norm2 - n2));
    }
};

AnnIndex::AnnIndex(int d, const AnnParams& p) : impl_(std::make_unique<Impl>()), d_(d) {
    if (d <= 0) throw ParamError("ann index: dimension must be positive");
    impl_->p = p;
    impl_->dim = p.mips == MipsMode::l2_transform ? d + 1 : d;
    impl_->metric = p.mips == MipsMode::l2_transform ? faiss::METRIC_L2 : faiss::METRIC_INNER_PRODUCT;
}

AnnIndex::~AnnIndex() = default;
AnnIndex::AnnIndex(AnnIndex&&) noexcept = default;
AnnIndex& AnnIndex::operator=(AnnIndex&&) noexcept = default;

AnnIndex::AnnIndex(const AnnIndex& o) : impl_(std::make_unique<Impl>()), d_(o.d_), ids_(o.ids_) {
    const Impl& s = *o.impl_;
    Impl& m = *impl_;
    m.p = s.p;
    m.dim = s.dim;
    m.max_norm2 = s.max_norm2;
    m.metric = s.metric;
    // the copy's quantizer stays empty: the cloned IVF index owns its own (own_fields), and search
    // reaches it through the index; scratch (visited table, buffers) is per instance
    if (!s.index) return;
    if (s.p.kind == AnnKind::hnsw) {
        // FAISS 1.7.3's clone_index turns an IndexHNSWFlat into a plain IndexHNSW (UBSan caught the
        // search's downcast): copy the graph here and give the copy its own storage
        // (and clone_index would slice the VecFlat storage to a plain IndexFlat: FAISS's scalar distances)
        const auto& src = static_cast<const faiss::IndexHNSWFlat&>(*s.index);
        auto h = vec_hnsw((int)src.d, 1, src.metric_type, src.storage);
        h->ntotal = src.ntotal;
        h->is_trained = src.is_trained;
        h->metric_arg = src.metric_arg;
        h->hnsw = src.hnsw;
        m.index = std::move(h);
    } else {
        m.index.reset(faiss::clone_index(s.index.get()));
    }
}

AnnIndex& AnnIndex::operator=(const AnnIndex& o) {
    if (this != &o) *this = AnnIndex(o);
    return *this;
}

int AnnIndex::nlist() const {
    if (!impl_->index || impl_->p.kind != AnnKind::ivf) return 0;
    return (int)static_cast<const faiss::IndexIVFFlat*>(impl_->index.get())->nlist;
}

void AnnIndex::build(const float* keys, const int32_t* ids, int n) {
    Impl& m = *impl_;
    m.index.reset();
    m.quantizer.reset();
    m.visited.reset();
    ids_.assign(ids, ids + n);
    if (n <= 0) return;
    const int d = d_, D = m.dim;
    m.max_norm2 = 0;
    if (m.p.mips == MipsMode::l2_transform)
        for (int i = 0; i < n; ++i) {
            double n2 = 0;
            for (int e = 0; e < d; ++e) n2 += (double)keys[(size_t)i * d + e] * keys[(size_t)i * d + e];
            m.max_norm2 = std::max(m.max_norm2, n2);
        }
    const float* x = keys;
    std::vector<float> aug;
    if (D != d) {
        aug.resize((size_t)n * D);
        for (int i = 0; i < n; ++i) m.transform_key(keys + (size_t)i * d, d, aug.data() + (size_t)i * D);
        x = aug.data();
    }
    // Small builds run serially: OpenMP's barriers cost more than they save there (and spin badly when the
    // cores are shared).
    const int threads = m.p.threads > 0 ? m.p.threads
                        : n < 16384   ? 1
                                      : std::max(1, std::min(openblas_get_num_threads(), omp_get_max_threads()));
    OmpThreads omp_guard(threads);
    faiss_call("build", [&] {
        switch (m.p.kind) {
            case AnnKind::flat:
                m.index = std::make_unique<faiss::IndexFlat>(D, m.metric);
                m.index->add(n, x);
                break;
            case AnnKind::ivf: {
                const int nl = std::clamp(m.p.nlist, 1, n);
                if (m.metric == faiss::METRIC_INNER_PRODUCT) m.quantizer = std::make_unique<faiss::IndexFlatIP>(D);
                else m.quantizer = std::make_unique<faiss::IndexFlatL2>(D);
                auto ivf = std::make_unique<faiss::IndexIVFFlat>(m.quantizer.get(), D, nl, m.metric);
                // FAISS warns on stderr below 39 training points per list; the library never prints, and
                // small lists are a documented consequence of nlist, so the threshold is lowered.
                ivf->cp.min_points_per_centroid = 1;
                ivf->train(n, x);
                ivf->add(n, x);
                m.index = std::move(ivf);
                break;
            }
            case AnnKind::hnsw: {
                auto h = vec_hnsw(D, m.p.hnsw_m, m.metric, nullptr);
                h->hnsw.efConstruction = m.p.ef_construction;
                // FAISS inserts in parallel with per-node locks, so the graph depends on thread timing;
                // one thread keeps results reproducible (levels come from FAISS's fixed-seed RNG).
                OmpThreads serial(1);
                h->add(n, x);
                m.index = std::move(h);
                break;
            }
        }
    });
}

void AnnIndex::add(const float* key, int32_t id) {
    Impl& m = *impl_;
    if (!m.index) {
        build(key, &id, 1);
        return;
    }
    m.row.resize((size_t)m.dim);
    m.transform_key(key, d_, m.row.data());
    OmpThreads omp_guard(1);
    faiss_call("add", [&] { m.index->add(1, m.row.data()); });
    ids_.push_back(id);
}

double AnnIndex::search(const float* q, int k, const AnnSearch& s, std::vector<int32_t>& out) {
    out.clear();
    Impl& m = *impl_;
    const faiss_idx total = m.index ? m.index->ntotal : 0;
    if (total == 0 || k <= 0) return 0;
    const int kk = (int)std::min<faiss_idx>(k, total);
    m.q.assign((size_t)m.dim, 0.0f);
    std::copy(q, q + d_, m.q.begin());
    m.dist.resize((size_t)kk);
    m.lab.resize((size_t)kk);
    double scanned = 0;
    faiss_call("search", [&] {
        switch (m.p.kind) {
            case AnnKind::flat:
                m.index->search(1, m.q.data(), kk, m.dist.data(), m.lab.data());
                scanned = (double)total;
                break;
            case AnnKind::ivf: {
                auto* ivf = static_cast<faiss::IndexIVFFlat*>(m.index.get());
                const int np = std::clamp(s.nprobe, 1, (int)ivf->nlist);
                m.assign.resize((size_t)np);
                m.cdist.resize((size_t)np);
                ivf->quantizer->search(1, m.q.data(), np, m.cdist.data(), m.assign.data());
                faiss::SearchParametersIVF sp;
                sp.nprobe = (size_t)np;
                faiss::IndexIVFStats stats;  // per call: FAISS's global indexIVF_stats is not touched
                ivf->search_preassigned(1, m.q.data(), kk, m.assign.data(), m.cdist.data(), m.dist.data(),
                                        m.lab.data(), false, &sp, &stats);
                scanned = (double)ivf->nlist + (double)stats.ndis;
                break;
            }
            case AnnKind::hnsw: {
                auto* h = static_cast<faiss::IndexHNSWFlat*>(m.index.get());
                if (!m.visited || (faiss_idx)m.visited->visited.size() < total)
                    m.visited = std::make_unique<faiss::VisitedTable>((int)total);
                std::unique_ptr<faiss::DistanceComputer> base(h->storage->get_distance_computer());
                CountingDistance dc;
                dc.base = base.get();
                dc.negate = m.metric == faiss::METRIC_INNER_PRODUCT;
                dc.set_query(m.q.data());
                const int ef = std::max(1, s.ef_search);
                h->hnsw.efSearch = ef;
                faiss::SearchParametersHNSW sp;
                sp.efSearch = ef;
                faiss::maxheap_heapify(kk, m.dist.data(), m.lab.data());
                h->hnsw.search(dc, kk, m.lab.data(), m.dist.data(), *m.visited, &sp);
                faiss::maxheap_reorder(kk, m.dist.data(), m.lab.data());
                scanned = (double)dc.count;
                break;
            }
        }
    });
    out.reserve((size_t)kk);
    for (int j = 0; j < kk; ++j) {
        const faiss_idx l = m.lab[(size_t)j];
        if (l >= 0 && l < (faiss_idx)ids_.size()) out.push_back(ids_[(size_t)l]);
    }
    return scanned;
}

double AnnIndex::overhead_bytes() const {
    const Impl& m = *impl_;
    if (!m.index) return 0;
    const double n = (double)m.index->ntotal;
    double b = m.dim != d_ ? 4.0 * n : 0.0;  // the l2_transform's extra coordinate
    switch (m.p.kind) {
        case AnnKind::flat: break;
        case AnnKind::ivf: {
            const auto* ivf = static_cast<const faiss::IndexIVFFlat*>(m.index.get());
            b += (double)ivf->nlist * m.dim * 4.0 + n * 8.0;  // centroids + int64 ids in the lists
            break;
        }
        case AnnKind::hnsw: {
            const auto& h = static_cast<const faiss::IndexHNSWFlat*>(m.index.get())->hnsw;
            b += (double)h.neighbors.size() * 4.0 + (double)h.offsets.size() * 8.0 + (double)h.levels.size() * 4.0;
            break;
        }
    }
    return b;
}

// ---------------------------------------------------------------------------------------------------
// The methods.

namespace {

enum class FaissGqa { per_head, union_ };
enum class Placement { gpu_fetch, cpu_attention };
enum class DecodeTokens { index, static_ };

struct FaissParams {
    AnnParams ann;
    double k = 100;        ///< budget: retrieved tokens per query head (>= 1 count, (0,1) fraction of visible)
    int sink = 128;        ///< static pattern: initial tokens
    int window = 512;      ///< static pattern: most recent tokens, the current one included
    double nprobe = 150;   ///< IVF: >= 1 lists, (0,1) fraction of nlist
    int ef_search = 16;    ///< HNSW search beam; the method searches with max(ef_search, k)
    FaissGqa gqa = FaissGqa::per_head;
    Placement placement = Placement::gpu_fetch;
    DecodeTokens decode = DecodeTokens::index;
};

class FaissMethod final : public Method {
  public:
    explicit FaissMethod(FaissParams p) : p_(p), index_(1, p.ann) {}

    std::unique_ptr<Method> clone_built(const Method& fresh) const override {
        return copy_built(*this, fresh, &FaissMethod::p_);
    }

    void build(const MethodContext& ctx, const KVView& prompt) override {
        ctx_ = ctx;
        index_ = AnnIndex(prompt.d, p_.ann);
        s_end_ = std::min(p_.sink, prompt.n);
        idx_end_ = std::max(s_end_, prompt.n - p_.window);
        std::vector<int32_t> ids;
        for (int i = s_end_; i < idx_end_; ++i) ids.push_back(i);
        index_.build(prompt.keys + (size_t)s_end_ * prompt.d, ids.data(), (int)ids.size());
        n_ = prompt.n;
        pending_d2h_ = 0;
    }

    void append(const KVView& kv, int pos) override {
        n_ = pos + 1;
        if (p_.decode != DecodeTokens::index) return;
        // Tokens that leave the window (the last `window` tokens, the current one included) move to the
        // CPU index, as the public RetrievalAttention code inserts each evicted window token.
        const int w0 = std::max(s_end_, n_ - p_.window);
        for (; idx_end_ < w0; ++idx_end_) {
            index_.add(kv.key(idx_end_), idx_end_);
            pending_d2h_ += ctx_.kv_token_bytes();
        }
    }

    void select(const float* q, int, const KVView& kv, Selection& out) override {
        const int n = kv.n, d = kv.d, g = ctx_.group;
        n_ = n;
        // Static pattern: sinks and everything after the index (window + decode tokens not indexed).
        stat_.clear();
        for (int i = 0; i < std::min(s_end_, n); ++i) stat_.push_back(i);
        for (int i = std::max(idx_end_, s_end_); i < n; ++i) stat_.push_back(i);

        const int k = std::min(resolve_budget(p_.k, n), index_.size());
        AnnSearch s;
        const int nl = index_.nlist();
        s.nprobe = p_.nprobe >= 1 ? (int)std::lround(p_.nprobe)
                                  : std::max(1, (int)std::lround(p_.nprobe * nl));
        // FAISS 1.7.3 stops an HNSW search once ef_search visited candidates beat the current one, so a
        // beam below k returns fewer than k results: the beam is at least k (as ef >= k is meant to be).
        s.ef_search = std::max(p_.ef_search, k);
        double scanned = 0;
        found_.resize((size_t)g);
        for (int h = 0; h < g; ++h) {
            if (k > 0) scanned += index_.search(q + (size_t)h * d, k, s, found_[(size_t)h]);
            else found_[(size_t)h].clear();
        }
        // Retrieved ids come from the index, which is disjoint from the static pattern; FAISS returns each
        // vector once per search, so lists are duplicate-free.
        std::unordered_set<int32_t> uni;
        for (const auto& f : found_) uni.insert(f.begin(), f.end());
        if (p_.gqa == FaissGqa::per_head) {
            out.exact.resize((size_t)g);
            for (int h = 0; h < g; ++h) {
                auto& l = out.exact[(size_t)h];
                l = stat_;
                l.insert(l.end(), found_[(size_t)h].begin(), found_[(size_t)h].end());
            }
        } else {
            auto& l = out.shared();
            l = stat_;
            l.insert(l.end(), uni.begin(), uni.end());
            std::sort(l.begin() + (std::ptrdiff_t)stat_.size(), l.end());
        }
        out.scan_ops = scanned;
        const double el = (double)dtype_bytes(ctx_.storage);
        // The index lives in CPU memory: the group's queries go there in both placements.
        out.d2h_bytes = (double)g * d * el + pending_d2h_;
        pending_d2h_ = 0;
        if (p_.placement == Placement::gpu_fetch) {
            out.h2d_bytes = (double)uni.size() * ctx_.kv_token_bytes();
            // transfer units for the system model's GPU block cache: retrieved tokens, interleaving the
            // heads' best-first lists rank by rank (most important first), each once
            append_interleaved_unique(found_, out.fetch_tokens);
        } else {
            out.h2d_bytes = (double)g * (d * el + 4.0);  // partial outputs + float32 LSE per query head
        }
    }

    Footprint footprint() const override {
        const double stat = std::min(s_end_, n_) + std::max(0, n_ - std::max(idx_end_, s_end_));
        return {stat * ctx_.kv_token_bytes(), index_.overhead_bytes()};
    }

  private:
    FaissParams p_;
    MethodContext ctx_;
    AnnIndex index_;
    int s_end_ = 0;    ///< sinks are [0, s_end_)
    int idx_end_ = 0;  ///< the index holds [s_end_, idx_end_)
    int n_ = 0;
    double pending_d2h_ = 0;  ///< evicted window KV copied to the CPU since the last select
    std::vector<int32_t> stat_;
    std::vector<std::vector<int32_t>> found_;
};

std::vector<ParamSpec> common_params(bool mips) {
    std::vector<ParamSpec> v = {
        {"k", ParamType::number, 100,
         "budget: tokens retrieved per query head: >= 1 tokens, in (0,1) a fraction of visible tokens",
         "RetrievalAttention §4.1: all indexing-based methods retrieve the top-100", 1e-9, 1e9},
        {"sink", ParamType::integer, 128, "static pattern: initial tokens kept on the GPU",
         "RetrievalAttention Table 2 (128 + 512); MInference retr_attn.py start_size", 0, 1e9},
        {"window", ParamType::integer, 512,
         "static pattern: most recent tokens kept on the GPU, the current one included",
         "RetrievalAttention Table 2 (128 + 512); MInference retr_attn.py recent_size", 1, 1e9},
    };
    if (mips)
        v.push_back({"mips", ParamType::string, "ip",
                     "ip: FAISS inner-product metric; l2_transform: extra key coordinate sqrt(M^2-|k|^2), query 0, "
                     "L2 search (exact MIPS reduction)",
                     "RetrievalAttention uses inner product; FAISS #1496: MIPS poorly handled by approximate "
                     "indexes",
                     -1e300, 1e300, {"ip", "l2_transform"}});
    v.push_back({"gqa", ParamType::string, "per_head",
                 "per_head: one search and list per query head; union: one shared list, the union of the "
                 "group's results",
                 "MInference retr_attn.py searches every query head", -1e300, 1e300, {"per_head", "union"}});
    v.push_back({"placement", ParamType::string, "gpu_fetch",
                 "traffic model: gpu_fetch: retrieved KV copied to the GPU; cpu_attention: attention over the "
                 "retrieved tokens on the CPU, partial outputs + LSE copied back",
                 "RetrievalAttention §3.3 (cpu_attention); gpu_fetch ours (as oracle_topk, wave)", -1e300,
                 1e300, {"gpu_fetch", "cpu_attention"}});
    v.push_back({"decode_tokens", ParamType::string, "index",
                 "index: tokens leaving the window are added to the index; static: every decode token stays in "
                 "the static pattern",
                 "index: MInference retr_attn.py (evicted window token inserted); static: RetrievalAttention "
                 "App. C",
                 -1e300, 1e300, {"index", "static"}});
    return v;
}

FaissParams common_from(const nlohmann::json& j, AnnKind kind) {
    FaissParams p;
    p.ann.kind = kind;
    p.k = j.at("k").get<double>();
    p.sink = j.at("sink").get<int>();
    p.window = j.at("window").get<int>();
    if (j.contains("mips")) p.ann.mips = parse_mips(j.at("mips").get<std::string>());
    p.gqa = j.at("gqa").get<std::string>() == "union" ? FaissGqa::union_ : FaissGqa::per_head;
    p.placement =
        j.at("placement").get<std::string>() == "cpu_attention" ? Placement::cpu_attention : Placement::gpu_fetch;
    p.decode = j.at("decode_tokens").get<std::string>() == "static" ? DecodeTokens::static_ : DecodeTokens::index;
    return p;
}

}  // namespace

MethodInfo faiss_flat_method_info() {
    MethodInfo m;
    m.name = "faiss_flat";
    m.description = "FAISS IndexFlatIP over the prompt keys outside sink+window: exact top-k per query head + "
                    "static pattern";
    m.paper = "Liu et al., RetrievalAttention (2024), §4.1 baseline 'Flat'; Douze et al., The Faiss library";
    m.params = common_params(false);
    mark_search_params(m, {"k", "gqa", "placement"});
    m.make = [](const nlohmann::json& j) { return std::make_unique<FaissMethod>(common_from(j, AnnKind::flat)); };
    return m;
}

MethodInfo faiss_ivf_method_info() {
    MethodInfo m;
    m.name = "faiss_ivf";
    m.description = "FAISS IndexIVFFlat over the prompt keys outside sink+window: top-k of nprobe lists per query "
                    "head + static pattern";
    m.paper = "Liu et al., RetrievalAttention (2024), §4.1 baseline 'IVF', Fig. 3a";
    m.params = common_params(true);
    m.params.push_back({"nlist", ParamType::integer, 512, "IVF lists (k-means centroids; at most the indexed keys)",
                        "MInference retr_attn.py (commented IVFIndexSQ n_centroids=512)", 1, 1e7});
    m.params.push_back({"nprobe", ParamType::number, 150,
                        "lists probed per query: >= 1 a count (integer), in (0,1) a fraction of nlist",
                        "MInference retr_attn.py set_nprobe(150): ~30% of the keys, RetrievalAttention §4.2 "
                        "('IVF scans 30%')",
                        1e-9, 1e7});
    mark_search_params(m, {"k", "gqa", "placement", "nprobe"});
    m.check = [](const nlohmann::json& j) {
        const double np = j.at("nprobe").get<double>();
        if (np >= 1 && np != std::floor(np))
            throw ParamError("parameter 'nprobe' = " + j.at("nprobe").dump() +
                             ": a value >= 1 is a list count and must be an integer (use (0,1) for a fraction)");
    };
    m.make = [](const nlohmann::json& j) {
        FaissParams p = common_from(j, AnnKind::ivf);
        p.ann.nlist = j.at("nlist").get<int>();
        p.nprobe = j.at("nprobe").get<double>();
        return std::make_unique<FaissMethod>(p);
    };
    return m;
}

MethodInfo faiss_hnsw_method_info() {
    MethodInfo m;
    m.name = "faiss_hnsw";
    m.description = "FAISS IndexHNSWFlat over the prompt keys outside sink+window: graph top-k per query head + "
                    "static pattern";
    m.paper = "Liu et al., RetrievalAttention (2024), Fig. 3a/6 (HNSW); Malkov & Yashunin (2018)";
    m.params = common_params(true);
    m.params.push_back({"M", ParamType::integer, 32, "HNSW neighbours per node (2M on level 0)",
                        "FAISS IndexHNSWFlat default", 2, 1024});
    m.params.push_back({"ef_construction", ParamType::integer, 40, "HNSW build beam width",
                        "FAISS HNSW default efConstruction", 1, 1e6});
    m.params.push_back({"ef_search", ParamType::integer, 16,
                        "HNSW search beam width; the search uses max(ef_search, k) (FAISS stops after ef_search "
                        "closer candidates)",
                        "FAISS HNSW default efSearch", 1, 1e7});
    mark_search_params(m, {"k", "gqa", "placement", "ef_search"});
    m.make = [](const nlohmann::json& j) {
        FaissParams p = common_from(j, AnnKind::hnsw);
        p.ann.hnsw_m = j.at("M").get<int>();
        p.ann.ef_construction = j.at("ef_construction").get<int>();
        p.ef_search = j.at("ef_search").get<int>();
        return std::make_unique<FaissMethod>(p);
    };
    return m;
}

}  // namespace retro
