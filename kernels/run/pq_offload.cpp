// PQCache with its KV offloaded (pq_offload.hpp).
#include "run/pq_offload.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include "methods/method.hpp"

namespace retro::gpu_run {

namespace {

/// The cache's sizes: pool rows per pair (capacity in whole blocks), its blocks' rows and table entries per
/// pair. A unit of whole cache blocks (PQCache's 128 tokens in 2 KB blocks) lies in unit / block_tokens pool
/// blocks; another unit (token_block 1: a token-level cache) in one pool block of its own size. The pool
/// holds as many units as the BlockCache's capacity admits (floor(capacity / unit)) either way.
struct CacheSizes {
    int64_t pool_rows = 0;
    int block_rows = 1, units = 0, unit_blocks = 0;
};

CacheSizes cache_sizes(const GpuLayerJob& job, int kv_rows) {
    CacheSizes c;
    const int ut = std::max(1, job.unit_tokens), bt = std::max(1, job.block_tokens);
    c.block_rows = ut % bt == 0 ? bt : ut;
    if (job.cache.capacity_slots < ut) return c;  // no unit fits: no cache
    c.pool_rows = job.cache.capacity_slots / c.block_rows * c.block_rows;
    c.units = (kv_rows + ut - 1) / ut, c.unit_blocks = ut / c.block_rows;
    return c;
}

}  // namespace

size_t PqOffload::device_bytes(const GpuLayerJob& job, const LayerShape& s, int kv_rows, int sink_end,
                               int static_from, int lists, int width) {
    const CacheSizes c = cache_sizes(job, kv_rows);
    const size_t row = 2 * (size_t)s.d * sizeof(uint16_t);  // K + V
    return (size_t)s.bh() * ((size_t)(sink_end + kv_rows - static_from) + (size_t)c.pool_rows) * row +
           (size_t)lists * width * row + (size_t)s.bh() * c.units * c.unit_blocks * sizeof(int32_t);
}

PqOffload::PqOffload(const GpuLayerJob& job, const LayerShape& s, const LayerKv& kv, int kv_rows, int sink_end,
                     int static_from, int per, int width)
    : job_(job), s_(s), kv_rows_(kv_rows), per_(per), width_(width), lists_(s.bh() * per) {
    const CacheSizes c = cache_sizes(job, kv_rows);
    C_ = c.pool_rows;
    const size_t d = (size_t)s.d, bh = (size_t)s.bh(), srows = (size_t)(sink_end + kv_rows - static_from);
    try {
        static_k_ = cuda::DeviceBuffer<uint16_t>(bh * srows * d), static_v_ = cuda::DeviceBuffer<uint16_t>(bh * srows * d);
        xk_ = cuda::DeviceBuffer<uint16_t>((size_t)lists_ * width * d), xv_ = cuda::DeviceBuffer<uint16_t>(xk_.size());
        if (C_ > 0) {
            pool_k_ = cuda::DeviceBuffer<uint16_t>(bh * C_ * d), pool_v_ = cuda::DeviceBuffer<uint16_t>(pool_k_.size());
            blocks_ = cuda::DeviceBuffer<int32_t>(bh * c.units * c.unit_blocks);
        }
    } catch (const GpuMemoryError&) {
        throw;
    } catch (const Error& e) {
        throw GpuMemoryError("pq at batch " + std::to_string(s.B) + ": " + e.what());
    }
    // the static rows of every pair: [0, sink_end) then [static_from, kv_rows) of its pinned rows
    for (size_t p = 0; p < bh; ++p) {
        const uint16_t* k = kv.K + p * kv_rows * d;
        const uint16_t* v = kv.V + p * kv_rows * d;
        uint16_t* sk = static_k_.get() + p * srows * d;
        uint16_t* sv = static_v_.get() + p * srows * d;
        cuda::copy_h2d(sk, k, (size_t)sink_end * d * sizeof(uint16_t));
        cuda::copy_h2d(sv, v, (size_t)sink_end * d * sizeof(uint16_t));
        cuda::copy_h2d(sk + sink_end * d, k + static_from * d, (size_t)(kv_rows - static_from) * d * sizeof(uint16_t));
        cuda::copy_h2d(sv + sink_end * d, v + static_from * d, (size_t)(kv_rows - static_from) * d * sizeof(uint16_t));
    }
    src_.seqs = s.bh(), src_.per = per, src_.d = s.d, src_.kv_rows = kv_rows, src_.sink_end = sink_end;
    src_.static_from = static_from, src_.static_rows = (int)srows;
    src_.static_k = static_k_.get(), src_.static_v = static_v_.get(), src_.store_k = kv.K, src_.store_v = kv.V;
    src_.unit_tokens = std::max(1, job.unit_tokens), src_.block_tokens = c.block_rows;
    block_rows_ = c.block_rows;
    if (C_ > 0) {
        const std::vector<int32_t> none(blocks_.size(), -1);
        cuda::copy_h2d(blocks_.get(), none.data(), blocks_.bytes());
        src_.blocks = blocks_.get(), src_.pool_k = pool_k_.get(), src_.pool_v = pool_v_.get(), src_.pool_rows = C_;
        CacheParams cp = job.cache;  // the same number of units as the model's cache, in whole pool blocks
        cp.capacity_slots = C_;
        for (size_t p = 0; p < bh; ++p) caches_.emplace_back(cp, c.block_rows);
        // an update admits at most a pool's worth of units and evicts as many: entries for both
        const size_t units = bh * (size_t)(C_ / src_.unit_tokens + 1);
        h_adm_ = cuda::PinnedBuffer<cuda::CopySegment>(units * c.unit_blocks);
        d_adm_ = cuda::DeviceBuffer<cuda::CopySegment>(h_adm_.size());
        h_at_ = cuda::PinnedBuffer<int64_t>(2 * units * c.unit_blocks), d_at_ = cuda::DeviceBuffer<int64_t>(h_at_.size());
        h_val_ = cuda::PinnedBuffer<int32_t>(h_at_.size()), d_val_ = cuda::DeviceBuffer<int32_t>(h_at_.size());
        h_table_ = cuda::PinnedBuffer<int32_t>((size_t)lists_ * width);
    }
}

void PqOffload::gather(const int32_t* d_table, const int32_t* d_lens, int coded_end, void* stream) {
    src_.coded_end = coded_end;
    cuda::pq_gather_rows(src_, d_table, d_lens, lists_, width_, xk_.get(), xv_.get(), stream);
}

PqOffload::Update PqOffload::collect(const int32_t* d_table, int fixed, int k, int n, cuda::Stream& stream) {
    Update u;
    u.miss_tokens.assign((size_t)s_.bh(), 0);
    if (C_ == 0) {  // no cache: the gather read every list's k retrieved tokens from host memory; nothing to read
        for (int64_t& m : u.miss_tokens) m = (int64_t)per_ * k;
        return u;
    }
    const auto t0 = std::chrono::steady_clock::now();
    // every list is its `fixed` static entries then its k retrieved ones (pq_select's layout): only those
    const size_t row_bytes = (size_t)(fixed + k) * sizeof(int32_t);
    cuda::copy_2d_async(h_table_.get(), (size_t)width_ * sizeof(int32_t), d_table, (size_t)width_ * sizeof(int32_t),
                            row_bytes, (size_t)lists_, stream.get());
    stream.synchronize();
    u.d2h_bytes = (double)row_bytes * lists_;
    const int ut = src_.unit_tokens;
    pending_reqs_.resize((size_t)s_.bh());
    found_.resize((size_t)per_);
    for (int p = 0; p < s_.bh(); ++p) {
        for (int j = 0; j < per_; ++j) {  // the pair's retrieved tokens per list, best first
            const size_t l = (size_t)p * per_ + j;
            const int32_t* row = h_table_.get() + l * width_;
            found_[(size_t)j].clear();
            for (int i = fixed; i < fixed + k; ++i) found_[(size_t)j].push_back(row[i] - p * kv_rows_);
        }
        const GpuCacheMap& cache = caches_[(size_t)p];
        for (const std::vector<int32_t>& f : found_)  // what the gather read from host memory: every list's
            for (int32_t t : f)                       // tokens whose unit was not resident (per list: per_head
                u.miss_tokens[(size_t)p] += cache.find(t / ut) ? 0 : 1;  // lists read their own)
        fetch_.clear();  // (append_interleaved_unique appends)
        append_interleaved_unique(found_, fetch_);
        token_unit_requests(fetch_, ut, /*needed_only=*/true, n, pending_reqs_[(size_t)p]);
    }
    pending_ = true;
    u.host_us = us_since(t0);
    return u;
}

PqOffload::Applied PqOffload::apply(cuda::Stream& stream) {
    Applied a;
    if (!pending_) return a;
    const auto t0 = std::chrono::steady_clock::now();
    const int ut = src_.unit_tokens, bt = block_rows_;
    const size_t d = (size_t)s_.d, ub = (size_t)(ut / bt);
    const int64_t per_pair = (int64_t)((kv_rows_ + ut - 1) / ut) * (int64_t)ub;
    size_t n_adm = 0, n_at = 0;
    std::vector<int64_t> admitted, evicted;
    // the lists' bound checked before each write (a pinned buffer has no slack past it)
    const auto room = [&](size_t adm, size_t at) {
        if (n_adm + adm > h_adm_.size() || n_at + at > h_at_.size())
            throw Error("cuda backend: pq's cache update larger than its bound (internal error)");
    };
    for (int p = 0; p < s_.bh(); ++p) {
        GpuCacheMap& cache = caches_[(size_t)p];
        cache.step(pending_reqs_[(size_t)p], admitted, &evicted);
        room(0, evicted.size() * ub);
        for (int64_t id : evicted)
            for (size_t j = 0; j < ub; ++j) h_at_[n_at] = p * per_pair + id * (int64_t)ub + (int64_t)j, h_val_[n_at++] = -1;
        for (int64_t id : admitted) {  // the whole unit from the pinned store into its blocks
            const std::vector<int32_t>& blocks = *cache.find(id);
            room(blocks.size(), blocks.size());
            for (size_t j = 0; j < blocks.size(); ++j) {
                const size_t from = ((size_t)p * kv_rows_ + (size_t)id * ut + j * bt) * d;
                const size_t to = ((size_t)p * C_ + (size_t)blocks[j] * bt) * d;
                h_adm_[n_adm++] = {src_.store_k + from, src_.store_v + from, pool_k_.get() + to, pool_v_.get() + to, bt};
                h_at_[n_at] = p * per_pair + id * (int64_t)ub + (int64_t)j, h_val_[n_at++] = blocks[j];
            }
            a.fill_bytes += 2.0 * (double)ut * (double)d * sizeof(uint16_t);
        }
    }
    // asynchronous: on the queue's own stream, overlapping the select on the method's (PQCache §3.4)
    updates_.queue({h_adm_, d_adm_, h_at_, h_val_, d_at_, d_val_}, n_adm, bt, n_at, s_.d, blocks_.get(), stream,
                   job_.async_update);
    pending_ = false;
    a.host_us = us_since(t0);
    return a;
}

}  // namespace retro::gpu_run
