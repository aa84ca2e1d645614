// The wave decode path on the GPU (RetroInfer §4, Fig. 5 steps 1-4; docs/cuda.md) for every KV head of
// a layer and B replicas of the request:
//   index    each KV head's wave index is built on the CPU by WaveHead (lib/methods/wave_head, the CPU
//            method's own code; k-means by segmented_kmeans or segmented_kmeans_gpu) and shared by the
//            replicas; its meta index goes to the GPU per (replica, head) as cent, vsum: [B*H, M, d]
//            fp16, sizes: [B*H, M] int32, valid: [B*H, M] uint8; the clustered KV is laid out cluster
//            after cluster in pinned host memory (or device memory: job.kv_on_gpu), store:
//            [B*H, N, d] fp16 (K and V)
//   steady   sink + every token after the index, kept at the front of each execution buffer
//            x: [B*H, X, d] fp16
//   a step   cluster_select (the zones) -> ranked ids to the host -> (estimate_attention on the GPU || the host's
//            cache lookup) -> copy_segments (cache hits from the GPU pool, misses zero-copy from pinned
//            memory, after the steady rows) -> attention over the execution buffer (FlashInfer's decode,
//            as full's library baseline, where it takes the shape; else decode_attention) merged with
//            the estimation by LSE;
//            then the cache admission scatter (off the critical path). One stream, CUDA events.
//   device   with the KV in device memory (job.kv_on_gpu, job.wave_device_gather): cluster_select ->
//            estimate_attention -> gather_clusters (the ranked clusters' rows from the device store, the
//            lengths on the device) -> FlashInfer over lengths and a split schedule built on the device
//            (LibraryDecode::plan_device): no ranked ids to the host, no lookup, no host planner, no cache
//            (every cluster is in device memory already).
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "run/cache_update.hpp"
#include "run/gpu_cache_map.hpp"
#include "run/host_pool.hpp"
#include "run/layer_common.hpp"
#include "run/layer_runs.hpp"

namespace retro::gpu_run {

using cuda::ClusterScoreShape;
using cuda::CopySegment;
using cuda::DecodeShape;

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kPage = kLibraryPage;

/// Lookup workers: job.host_threads, or min(8, cores - 1) (more only wake more threads for ~1 us items).
int pool_threads(int requested) {
    if (requested > 0) return requested;
    const int hw = (int)std::thread::hardware_concurrency();
    return std::max(1, std::min(8, hw - 1));
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

/// Runs `alloc`, reporting a failed allocation as GpuMemoryError (the runner skips the batch point).
template <class F>
void allocating(const std::string& what, F&& alloc) {
    try {
        alloc();
    } catch (const GpuMemoryError&) {
        throw;
    } catch (const ParamError&) {
        throw;
    } catch (const Error& e) {
        throw GpuMemoryError(what + ": " + e.what());
    }
}

/// A miss or hit placed in the execution buffer this step: cluster `id` at rows [row, row + tokens).
struct Placed {
    int64_t id;
    int row, tokens;
};

class WaveLayer {
  public:
    WaveLayer(const GpuLayerJob& job, const StepFn& on_step)
        : job_(job), on_step_(on_step), s_(check_job(job)), st_(stream_.get()), q_(job, s_), o_(s_),
          pool_(pool_threads(job.host_threads)) {}

    void run() {
        // the split select's occupancy, asked here once (cluster_select asks it under auto): never first inside
        // a step graph's capture, where the query may be refused
        if (cuda::select_split() == cuda::SelectSplit::automatic)
            for (const int m : {4096, 8192}) cuda::select_split_active_clusters(m);
        build_heads();
        for (int t = 0; t <= s_.last; ++t) {
            const int pos = s_.prompt + t;
            bool grew = false;
            for (size_t k = 0; k < heads_.size(); ++k) grew |= heads_[k].append(kv_of((int)k, pos + 1), pos);
            if (grew) {
                flush_update();  // the caches' pending update first: the table is rebuilt from them
                layout();
            }
            if (std::find(job_.steps.begin(), job_.steps.end(), t) == job_.steps.end()) continue;
            step(t, t == job_.steps.front());
        }
        flush_update();
    }

  private:
    /// The slice of head index k (sequence k / H, KV head k % H: heads_' order).
    const HeadSlice& slice(int k) const { return head_of(job_, k / s_.H, k % s_.H); }
    KVView kv_of(int k, int n) const {
        const HeadSlice& hs = slice(k);
        return {hs.keys.data(), hs.values.data(), n, s_.d};
    }
    size_t bh_rows(int rows) const { return (size_t)s_.bh() * rows * s_.d; }

    void build_heads() {
        // [D * H]: sequence q's KV head h at q * H + h (s_.head_index of a pair)
        const size_t need_heads = (size_t)s_.D * s_.H;
        if (job_.built) {  // built once for the layer: a copy (the run appends decode tokens to it)
            if (job_.built->wave.size() < need_heads)
                throw ParamError("cuda backend: job.built has " + std::to_string(job_.built->wave.size()) +
                                 " heads for a job of " + std::to_string(s_.D) + " sequences of " + std::to_string(s_.H));
            heads_.assign(job_.built->wave.begin(), job_.built->wave.begin() + (ptrdiff_t)need_heads);
            build_ms_ = job_.built->build_ms;
        } else {
            BuiltIndex b = build_wave_heads(job_);
            heads_.assign(b.wave.begin(), b.wave.begin() + (ptrdiff_t)need_heads);
            build_ms_ = b.build_ms;
        }
        if (job_.kv_on_gpu) {
            const size_t need = 2 * bh_rows(s_.tokens) * sizeof(uint16_t);
            if (need > cuda::device_free_bytes())
                throw GpuMemoryError("wave at batch " + std::to_string(s_.B) + ": the KV store needs " +
                                     std::to_string(need >> 20) + " MiB of GPU memory; " +
                                     std::to_string(cuda::device_free_bytes() >> 20) + " MiB free");
            allocating("wave at batch " + std::to_string(s_.B) + ": device KV store", [&] {
                dstore_k_ = cuda::DeviceBuffer<uint16_t>(bh_rows(s_.tokens));
                dstore_v_ = cuda::DeviceBuffer<uint16_t>(dstore_k_.size());
            });
        } else {
            allocating("wave at batch " + std::to_string(s_.B) + ": pinned KV store", [&] {
                store_k_ = cuda::PinnedBuffer<uint16_t>(bh_rows(s_.tokens));
                store_v_ = cuda::PinnedBuffer<uint16_t>(store_k_.size());
            });
        }
        stored_.assign(heads_.size(), 0);
        bh_segs_.assign((size_t)s_.bh(), {});
        caches_.clear();
        for (int i = 0; i < s_.bh(); ++i) caches_.emplace_back(job_.cache, job_.block_tokens);
        C_ = caches_[0].blocks() * job_.block_tokens;
        layout();
    }

    /// After the index changed: the store gets the new clusters' rows, the GPU the new meta index,
    /// the execution buffers their (possibly larger) capacity and a fresh steady zone.
    void layout() {
        const int m = heads_[0].index().num_clusters();
        for (const WaveHead& w : heads_)
            if (w.index().num_clusters() != m)
                throw Error("cuda backend: the KV heads of a layer have different cluster counts (internal error)");
        fill_store();
        const WaveHead::Zones z = heads_[0].budget();
        M_ = m, R_ = z.r, E_ = z.e;
        // execution buffer rows: the largest steady zone still to come + the R largest clusters
        int retr = 0;
        for (const WaveHead& w : heads_) {
            std::vector<int32_t> sz(w.index().sizes());
            std::nth_element(sz.begin(), sz.begin() + std::min<size_t>(R_, sz.size()), sz.end(), std::greater<>());
            int sum = 0;
            for (int i = 0; i < R_ && i < (int)sz.size(); ++i) sum += sz[(size_t)i];
            retr = std::max(retr, sum);
        }
        const bool library = job_.full_kernel == FullKernel::library &&
                             cuda::library_decode_unsupported(s_.d, s_.g).empty();
        int X = heads_[0].steady_tokens(s_.tokens) + retr;
        if (library) X = (X + kPage - 1) / kPage * kPage;  // whole pages for the library kernel
        ClusterScoreShape cs{s_.B, s_.H, s_.g, M_, s_.d, 0.0f};
        DecodeShape ds;
        ds.batch = s_.B, ds.kv_heads = s_.H, ds.group = s_.g, ds.d = s_.d, ds.capacity = std::max(X, X_);
        ds.split = decode_split(ds.capacity, s_.bh());
        const size_t bh = (size_t)s_.bh(), d = (size_t)s_.d;
        const size_t need = bh * M_ * (4 * d + 13) + cuda::cluster_rank_workspace(cs) + bh * (E_ + 1) * 4 +
                            cuda::estimate_workspace_floats(cs, E_) * 4 +
                            (X > X_ ? 4 * bh * X * d : 0) + (pool_k_.size() == 0 ? 4 * bh * C_ * d : 0) +
                            cuda::decode_workspace_floats(ds) * 4;
        if (need > cuda::device_free_bytes())
            throw GpuMemoryError("wave at batch " + std::to_string(s_.B) + " needs " + std::to_string(need >> 20) +
                                 " MiB more GPU memory; " + std::to_string(cuda::device_free_bytes() >> 20) +
                                 " MiB free");
        allocating("wave at batch " + std::to_string(s_.B), [&] {
            upload_index(cs);
            if (X > X_) {
                X_ = X;
                xk_ = cuda::DeviceBuffer<uint16_t>(bh_rows(X_));
                xv_ = cuda::DeviceBuffer<uint16_t>(xk_.size());
                h_ssegs_ = cuda::PinnedBuffer<CopySegment>(bh), d_ssegs_ = cuda::DeviceBuffer<CopySegment>(bh);
                const size_t stage = heads_.size() * heads_[0].steady_tokens(s_.tokens) * d;
                stage_k_ = cuda::PinnedBuffer<uint16_t>(stage), stage_v_ = cuda::PinnedBuffer<uint16_t>(stage);
                h_lens_ = cuda::PinnedBuffer<int32_t>(bh), d_lens_ = cuda::DeviceBuffer<int32_t>(bh);
            }
            // copy descriptors: a hit is one per block at most, a miss one
            const size_t segs = bh * ((size_t)X_ / job_.block_tokens + R_ + 2);
            if (h_segs_.size() < segs) {
                h_segs_ = cuda::PinnedBuffer<CopySegment>(segs), d_segs_ = cuda::DeviceBuffer<CopySegment>(segs);
                h_adm_ = cuda::PinnedBuffer<CopySegment>(segs), d_adm_ = cuda::DeviceBuffer<CopySegment>(segs);
            }
            if (pool_k_.size() == 0 && C_ > 0) {
                pool_k_ = cuda::DeviceBuffer<uint16_t>(bh_rows((int)C_));
                pool_v_ = cuda::DeviceBuffer<uint16_t>(pool_k_.size());
            }
            ds_ = ds;
            ds_.capacity = X_;
            dec_work_ = cuda::DeviceBuffer<float>(cuda::decode_workspace_floats(ds_));
            if (library) {  // planned once at full capacity: the plan's buffers sized before any step
                lib_ = std::make_unique<cuda::LibraryDecode>(ds_, kPage);
                std::vector<int32_t> full((size_t)s_.bh(), X_);
                lib_->plan(full.data(), st_);
                if (on_device()) {  // its schedule and table allocated here, not in a timed step
                    cuda::copy_h2d(d_lens_.get(), full.data(), full.size() * sizeof(int32_t));
                    lib_->plan_device(d_lens_.get(), st_);
                }
                stream_.synchronize();
            }
            if (est_out_.size() == 0) {
                est_out_ = cuda::DeviceBuffer<float>((size_t)s_.B * s_.hq() * d);
                est_lse_ = cuda::DeviceBuffer<float>((size_t)s_.B * s_.hq());
            }
            if (device_lookup()) upload_cache_table();
        });
        steady_ = 0;  // the index moved: the steady zone is rebuilt at the next step
        ++layout_epoch_;
    }

    /// Appends the rows of every new cluster member (cluster order) to the KV store of each replica:
    /// written in place in pinned memory, or staged there and copied to the device store.
    void fill_store() {
        const size_t d = (size_t)s_.d, N = (size_t)s_.tokens;
        const bool dev = job_.kv_on_gpu;
        for (size_t k = 0; k < heads_.size(); ++k) {  // head index k = sequence q's KV head h: replicas q, q + D, ...
            const int q = (int)k / s_.H, h = (int)k % s_.H;
            const auto& mem = heads_[k].index().member_array();
            const size_t from = (size_t)stored_[k], count = mem.size() - from;
            if (count == 0) continue;
            const size_t at = ((size_t)h * N + from) * d, rep = (size_t)s_.H * N * d;  // replica stride
            cuda::PinnedBuffer<uint16_t> sk, sv;
            if (dev) sk = cuda::PinnedBuffer<uint16_t>(count * d), sv = cuda::PinnedBuffer<uint16_t>(count * d);
            uint16_t* k0 = dev ? sk.get() : store_k_.get() + at + q * rep;
            uint16_t* v0 = dev ? sv.get() : store_v_.get() + at + q * rep;
            rows_to_half(slice((int)k), mem.data() + from, count, k0, v0);
            for (int b = dev ? q : q + s_.D; b < s_.B; b += s_.D) {
                if (dev) {
                    cuda::copy_h2d(dstore_k_.get() + at + b * rep, k0, count * d * sizeof(uint16_t));
                    cuda::copy_h2d(dstore_v_.get() + at + b * rep, v0, count * d * sizeof(uint16_t));
                } else {
                    std::copy(k0, k0 + count * d, store_k_.get() + at + b * rep);
                    std::copy(v0, v0 + count * d, store_v_.get() + at + b * rep);
                }
            }
            stored_[k] = (int)mem.size();
        }
    }
    uint16_t* store_k() { return job_.kv_on_gpu ? dstore_k_.get() : store_k_.get(); }
    uint16_t* store_v() { return job_.kv_on_gpu ? dstore_v_.get() : store_v_.get(); }

    void upload_index(const ClusterScoreShape& cs) {
        const size_t H = (size_t)s_.H, M = (size_t)M_, d = (size_t)s_.d, bh = (size_t)s_.bh();
        cent_ = cuda::DeviceBuffer<uint16_t>(bh * M * d), vsum_ = cuda::DeviceBuffer<uint16_t>(bh * M * d);
        sizes_ = cuda::DeviceBuffer<int32_t>(bh * M), valid_ = cuda::DeviceBuffer<uint8_t>(bh * M);
        offsets_ = cuda::DeviceBuffer<int32_t>(bh * M);
        agg_ = cuda::DeviceBuffer<float>(bh * M), ranked_ = cuda::DeviceBuffer<int32_t>(bh * M);
        rank_work_ = cuda::DeviceBuffer<char>(cuda::cluster_rank_workspace(cs));
        est_work_ = cuda::DeviceBuffer<float>(cuda::estimate_workspace_floats(cs, E_));
        est_ids_ = cuda::DeviceBuffer<int32_t>(bh * std::max(E_, 1));
        h_ranked_ = cuda::PinnedBuffer<int32_t>(bh * std::max(R_, 1));
        h_rank0_ = cuda::PinnedBuffer<int32_t>(H * std::max(R_ + E_, 1));
        const size_t K = heads_.size();  // every (sequence, KV head), in head-index order
        cuda::PinnedBuffer<uint16_t> c(K * M * d), v(K * M * d);
        cuda::PinnedBuffer<int32_t> sz(K * M), off(K * M);
        cuda::PinnedBuffer<uint8_t> ok(K * M);
        for (size_t h = 0; h < K; ++h) {
            const WaveIndex& ix = heads_[h].index();
            to_half(ix.centroids().data(), M * d, c.get() + h * M * d);
            to_half(ix.value_sums().data(), M * d, v.get() + h * M * d);
            for (size_t j = 0; j < M; ++j) {
                sz[h * M + j] = ix.size((int)j), ok[h * M + j] = ix.size((int)j) > 0;
                off[h * M + j] = (int32_t)ix.offsets()[j];  // the cluster's first row in the store
            }
        }
        for (int b = 0; b < s_.B; ++b) {  // replica b: its sequence's H heads
            const size_t q = (size_t)s_.seq(b) * H;
            cuda::copy_h2d(cent_.get() + b * H * M * d, c.get() + q * M * d, H * M * d * sizeof(uint16_t));
            cuda::copy_h2d(vsum_.get() + b * H * M * d, v.get() + q * M * d, H * M * d * sizeof(uint16_t));
            cuda::copy_h2d(sizes_.get() + b * H * M, sz.get() + q * M, H * M * sizeof(int32_t));
            cuda::copy_h2d(valid_.get() + b * H * M, ok.get() + q * M, H * M * sizeof(uint8_t));
            cuda::copy_h2d(offsets_.get() + b * H * M, off.get() + q * M, H * M * sizeof(int32_t));
        }
    }

    /// Brings the steady rows at the front of every execution buffer up to n visible tokens.
    void sync_steady(int n) {
        ids_.clear();
        heads_[0].steady_ids(n, ids_);  // the steady zone is the same positions in every head
        const int from = steady_, count = (int)ids_.size() - from;
        if (count <= 0) return;
        const size_t d = (size_t)s_.d;
        for (size_t k = 0; k < heads_.size(); ++k)  // every (sequence, KV head) staged once
            rows_to_half(slice((int)k), ids_.data() + from, (size_t)count, stage_k_.get() + k * count * d,
                         stage_v_.get() + k * count * d);
        for (int p = 0; p < s_.bh(); ++p) {
            const size_t x = ((size_t)p * X_ + from) * d, k = (size_t)s_.head_index(p);
            h_ssegs_[(size_t)p] = {stage_k_.get() + k * count * d, stage_v_.get() + k * count * d, xk_.get() + x,
                                   xv_.get() + x, count};
        }
        cuda::copy_h2d_async(d_ssegs_.get(), h_ssegs_.get(), h_ssegs_.bytes(), st_);
        cuda::copy_segments(d_ssegs_.get(), s_.bh(), s_.d, count, st_);
        steady_ = (int)ids_.size();
    }

    /// Host side of a step: each (replica, head)'s ranked retrieval clusters looked up in its cache;
    /// hits copied from the pool, misses from the pinned store, after the steady rows. Parallel over the
    /// (replica, head)s (host_pool), then the copy lists are concatenated in order.
    void lookup(int S, std::vector<std::vector<Placed>>& misses, std::vector<int64_t>& miss_tokens) {
        const size_t d = (size_t)s_.d, N = (size_t)s_.tokens, bt = (size_t)job_.block_tokens;
        pool_.for_each(s_.bh(), parallel(), [&](int bh) {
            std::vector<CopySegment>& segs = bh_segs_[(size_t)bh];
            segs.clear();
            auto add = [&](const uint16_t* sk, const uint16_t* sv, uint16_t* dk, uint16_t* dv, int64_t tokens) {
                if (!segs.empty()) {  // extend the previous segment when both ends continue it
                    CopySegment& p = segs.back();
                    if (p.src_k + p.tokens * d == sk && p.dst_k + p.tokens * d == dk && p.src_v + p.tokens * d == sv) {
                        p.tokens += tokens;
                        return;
                    }
                }
                segs.push_back({sk, sv, dk, dv, tokens});
            };
            const WaveIndex& ix = heads_[(size_t)s_.head_index(bh)].index();
            const size_t xrow0 = (size_t)bh * X_, srow0 = (size_t)bh * N, prow0 = (size_t)bh * C_;
            int row = S;
            misses[(size_t)bh].clear();
            reqs_[(size_t)bh].clear();
            miss_tokens[(size_t)bh] = 0;
            for (int i = 0; i < R_; ++i) {
                const int c = h_ranked_[(size_t)bh * R_ + i];
                const int sz = ix.size(c);
                if (sz == 0) continue;  // empty clusters rank last: nothing to fetch
                reqs_[(size_t)bh].push_back({c, sz, unit_slots(sz, job_.block_tokens)});
                uint16_t* dk = xk_.get() + (xrow0 + row) * d;
                uint16_t* dv = xv_.get() + (xrow0 + row) * d;
                if (const auto* blocks = caches_[(size_t)bh].find(c)) {
                    for (size_t j = 0; j < blocks->size(); ++j) {
                        const size_t p = (prow0 + (size_t)(*blocks)[j] * bt) * d;
                        const int64_t rows = std::min<int64_t>((int64_t)bt, sz - (int64_t)(j * bt));
                        add(pool_k_.get() + p, pool_v_.get() + p, dk + j * bt * d, dv + j * bt * d, rows);
                    }
                } else {
                    const size_t src = (srow0 + (size_t)ix.offsets()[(size_t)c]) * d;
                    add(store_k() + src, store_v() + src, dk, dv, sz);
                    misses[(size_t)bh].push_back({c, row, sz});
                    miss_tokens[(size_t)bh] += sz;
                }
                row += sz;
            }
            h_lens_[(size_t)bh] = row;
        });
        n_segs_ = gather_lists(h_segs_, max_seg_);
    }

    /// The host work of a step on the pool's workers only when there is enough of it: on the H200
    /// (2026-11-27) the lookups of one step took 140-835 us at batch 1 through 15 woken workers, where
    /// the caller alone does ~1,200 lookups in ~10 us. Below kParallelLookups the caller does them.
    static constexpr int kParallelLookups = 4096;
    bool parallel() const { return (int64_t)s_.bh() * R_ > kParallelLookups; }

    /// Concatenates the per-(replica, head) copy lists into `out`; returns their count, `longest` the
    /// most tokens of one segment.
    int gather_lists(cuda::PinnedBuffer<CopySegment>& out, int64_t& longest) {
        size_t n = 0;
        for (const auto& v : bh_segs_) n += v.size();
        if (n > out.size()) throw Error("cuda backend: copy list larger than its bound (internal error)");
        n = 0, longest = 0;
        for (const auto& v : bh_segs_)
            for (const CopySegment& sg : v) out[n++] = sg, longest = std::max(longest, sg.tokens);
        return (int)n;
    }

    /// Pair `bh`'s cache update (its requests reqs_[bh] of this step): the BlockCache's step, then each
    /// admitted cluster's rows copied from where it missed in the execution buffer into its pool blocks
    /// (bh_segs_[bh]); with `entries`, the device table's changes too (the admitted clusters' blocks set,
    /// the evicted ones' cleared: device_lookup()).
    void update_cache(int bh, const std::vector<Placed>& misses, std::vector<std::pair<int64_t, int32_t>>* entries) {
        const size_t d = (size_t)s_.d, bt = (size_t)job_.block_tokens;
        std::vector<CopySegment>& segs = bh_segs_[(size_t)bh];
        segs.clear();
        std::vector<int64_t> admitted, evicted;
        caches_[(size_t)bh].step(reqs_[(size_t)bh], admitted, entries ? &evicted : nullptr);
        const std::vector<int32_t>* first = entries ? &first_[(size_t)s_.head_index(bh)] : nullptr;
        const int64_t base = (int64_t)bh * NB_;
        if (entries) {
            entries->clear();
            const WaveIndex& ix = heads_[(size_t)s_.head_index(bh)].index();
            for (int64_t id : evicted)
                for (int j = 0, n = (ix.size((int)id) + (int)bt - 1) / (int)bt; j < n; ++j)
                    entries->push_back({base + (*first)[(size_t)id] + j, -1});
        }
        auto it = misses.begin();  // admissions come in rank order, like the misses
        for (int64_t id : admitted) {
            while (it != misses.end() && it->id != id) ++it;
            if (it == misses.end()) throw Error("cuda backend: admitted a cluster that did not miss");
            const std::vector<int32_t>& blocks = *caches_[(size_t)bh].find(id);
            for (size_t j = 0; j < blocks.size(); ++j) {
                if (entries) entries->push_back({base + (*first)[(size_t)id] + (int64_t)j, blocks[j]});
                const size_t x = ((size_t)bh * X_ + it->row + j * bt) * d;
                const size_t p = ((size_t)bh * C_ + (size_t)blocks[j] * bt) * d;
                const int64_t rows = std::min<int64_t>((int64_t)bt, it->tokens - (int64_t)(j * bt));
                segs.push_back({xk_.get() + x, xv_.get() + x, pool_k_.get() + p, pool_v_.get() + p, rows});
            }
        }
    }

    /// After the step: each cache's update, and the admitted clusters copied from the execution buffer
    /// into their pool blocks (the copy list; returns its length, `longest` its largest segment).
    int admit(const std::vector<std::vector<Placed>>& misses, int64_t& longest) {
        pool_.for_each(s_.bh(), parallel(), [&](int bh) { update_cache(bh, misses[(size_t)bh], nullptr); });
        return gather_lists(h_adm_, longest);
    }

    bool device_gather() const { return job_.kv_on_gpu && job_.wave_device_gather; }
    /// The KV in pinned host memory, the execution buffers assembled on the device from the ranked ids and
    /// the cache's table on the GPU (issue 40 #2): hits from the pool, misses zero-copy from the store in one
    /// kernel, no round trip to the host before attention; the cache's update (admission) after it.
    bool device_lookup() const { return !job_.kv_on_gpu && job_.wave_device_gather; }
    bool on_device() const { return device_gather() || device_lookup(); }
    /// device_lookup() with the cache's update of step t applied at step t+1, on the host while the GPU
    /// ranks and estimates (GpuLayerJob::async_update): the update off the step's critical path, in
    /// the next step's window where it is not hidden.
    bool async_update() const { return device_lookup() && job_.async_update; }

    /// The GPU block cache's table on the device (device_lookup()), after an index change: each cluster's
    /// first entry (first_, per head: its blocks counted as if every cluster were resident) and every
    /// resident cluster's pool blocks, from the caches' placement; the misses' rows and the update lists.
    void upload_cache_table() {
        const size_t bh = (size_t)s_.bh(), M = (size_t)M_;
        const int bt = job_.block_tokens;
        first_.assign(heads_.size(), {});
        NB_ = 1;
        for (size_t h = 0; h < heads_.size(); ++h) {
            const WaveIndex& ix = heads_[h].index();
            std::vector<int32_t>& f = first_[(size_t)h];
            f.resize(M);
            int at = 0;
            for (size_t c = 0; c < M; ++c) f[c] = at, at += (ix.size((int)c) + bt - 1) / bt;
            NB_ = std::max(NB_, at);
        }
        std::vector<int32_t> first(bh * M), blocks(bh * NB_, -1);
        for (size_t p = 0; p < bh; ++p) {
            const std::vector<int32_t>& f = first_[(size_t)s_.head_index((int)p)];
            std::copy(f.begin(), f.end(), first.begin() + (ptrdiff_t)(p * M));
            for (const auto& [id, bl] : caches_[p].resident())
                for (size_t j = 0; j < bl.size(); ++j) blocks[p * NB_ + f[(size_t)id] + j] = bl[j];
        }
        d_first_ = cuda::DeviceBuffer<int32_t>(first.size());
        d_blocks_ = cuda::DeviceBuffer<int32_t>(blocks.size());
        cuda::copy_h2d(d_first_.get(), first.data(), first.size() * sizeof(int32_t));
        cuda::copy_h2d(d_blocks_.get(), blocks.data(), blocks.size() * sizeof(int32_t));
        const size_t r = (size_t)std::max(R_, 1);
        d_miss_ = cuda::DeviceBuffer<int32_t>(bh * r), h_miss_ = cuda::PinnedBuffer<int32_t>(bh * r);
        // an admission sets the admitted clusters' entries and clears the evicted ones': each at most the
        // blocks of an execution buffer's retrieval rows (the evicted make room for the admitted)
        const size_t cap = bh * 2 * ((size_t)X_ / bt + R_ + 2);
        if (h_at_.size() < cap) {
            h_at_ = cuda::PinnedBuffer<int64_t>(cap), d_at_ = cuda::DeviceBuffer<int64_t>(cap);
            h_val_ = cuda::PinnedBuffer<int32_t>(cap), d_val_ = cuda::DeviceBuffer<int32_t>(cap);
        }
        bh_entries_.assign(bh, {});
    }

    /// After a step on the device path with the KV in host memory (device_lookup()), its ranked ids and
    /// misses' rows read back: each (replica, head)'s requests (reqs_) and misses (pending_misses_) and the
    /// tokens it read over PCIe (miss_tokens). Cheap: what the step's report needs.
    void collect_misses(std::vector<int64_t>& miss_tokens) {
        pending_misses_.resize((size_t)s_.bh());
        for (int p = 0; p < s_.bh(); ++p) {
            const WaveIndex& ix = heads_[(size_t)s_.head_index(p)].index();
            reqs_[(size_t)p].clear(), pending_misses_[(size_t)p].clear();
            miss_tokens[(size_t)p] = 0;
            for (int i = 0; i < R_; ++i) {
                const int c = h_ranked_[(size_t)p * R_ + i], sz = ix.size(c);
                if (sz == 0) continue;
                reqs_[(size_t)p].push_back({c, sz, unit_slots(sz, job_.block_tokens)});
                const int row = h_miss_[(size_t)p * R_ + i];
                // layout() sizes the buffers for the largest zones, so no miss is cut by their end; one that
                // were would be admitted from the next pair's rows (or past the buffer): refused by name
                if (row >= 0 && (int64_t)row + sz > X_)
                    throw Error("wave: a missed cluster's rows run past the execution buffer (rows " + std::to_string(row) +
                                " + " + std::to_string(sz) + " of " + std::to_string(X_) + ")");
                if (row >= 0) pending_misses_[(size_t)p].push_back({c, row, sz}), miss_tokens[(size_t)p] += sz;
            }
        }
    }

    /// The caches' update for the collected step (collect_misses): each cache's step on the host (the same
    /// BlockCache policy as the host path), then the admitted clusters copied from the execution buffer into
    /// their pool blocks and the device table's entries set (admitted) and cleared (evicted), queued on the
    /// stream, so before any later gather. Returns the host part's time (us).
    double apply_update() {
        const auto t0 = Clock::now();
        pool_.for_each(s_.bh(), parallel(), [&](int p) {
            update_cache(p, pending_misses_[(size_t)p], &bh_entries_[(size_t)p]);
        });
        size_t n = 0;
        for (const auto& e : bh_entries_) n += e.size();
        if (n > h_at_.size()) throw Error("cuda backend: cache table updates larger than their bound (internal error)");
        n = 0;
        for (const auto& e : bh_entries_)
            for (const auto& [at, v] : e) h_at_[n] = at, h_val_[n] = v, ++n;
        int64_t longest = 0;
        const int n_adm = gather_lists(h_adm_, longest);
        // asynchronous: on the queue's own stream, overlapping the ranking and estimation on st_ (RetroInfer's
        // asynchronous cache update); else on st_ after the attention (admit_us)
        updates_.queue({h_adm_, d_adm_, h_at_, h_val_, d_at_, d_val_}, (size_t)n_adm, longest, n, s_.d, d_blocks_.get(),
                       stream_, async_update());
        return ms_since(t0) * 1e3;
    }

    /// The asynchronous update's pending step applied now (before an index change rebuilds the table, and
    /// at the end of the run), synchronized.
    void flush_update() {
        if (!pending_) return;
        apply_update();
        pending_ = false;
        stream_.synchronize();
    }

    void step(int t, bool first) {
        if (parallel() && !on_device()) pool_.wake();  // the lookup workers spin: the ids arrive in ~100 us
        const int n = s_.prompt + t + 1;
        // the asynchronous update's scatter reads the last step's retrieval rows, where the steady zone
        // grows: the steady rows are written after it (device_step)
        if (!(async_update() && pending_)) sync_steady(n);
        const int S = steady_;
        q_.stage(t, st_);
        const bool ranked = M_ > 0 && R_ + E_ > 0;
        const ClusterScoreShape cs{s_.B, s_.H, s_.g, M_, s_.d, 0.0f};
        const auto rank = [&] {
            if (ranked)  // the zones only: the top R in rank order, the next E as a set
                cuda::cluster_select(cs, R_, E_, q_.device(), cent_.get(), valid_.get(), agg_.get(), ranked_.get(),
                                     rank_work_.get(), rank_work_.size(), st_);
        };
        const auto estimate = [&] {
            if (!ranked || E_ == 0) return;
            cuda::copy_2d_async(est_ids_.get(), E_ * 4, ranked_.get() + R_, (size_t)M_ * 4, (size_t)E_ * 4,
                                (size_t)s_.bh(), st_);
            cuda::estimate_attention(cs, E_, est_ids_.get(), q_.device(), cent_.get(), vsum_.get(), sizes_.get(),
                                     est_out_.get(), est_lse_.get(), est_work_.get(), st_);
        };
        const bool est = ranked && E_ > 0;
        // the attention over the execution buffer merged with the estimation: FlashInfer's decode (planned
        // on the host once the lengths are known) where it takes the shape and every buffer holds a
        // token, else the own kernel
        // the device path: lengths stay on the device (every buffer holds the steady rows, S > 0)
        const bool device = ranked && on_device();
        bool planned = false;
        const auto plan = [&] {
            if (device) {
                planned = lib_ && S > 0;
                if (planned) lib_->plan_device(d_lens_.get(), st_);
                return;
            }
            planned = lib_ && std::all_of(h_lens_.get(), h_lens_.get() + s_.bh(), [](int32_t l) { return l > 0; });
            if (planned) lib_->plan(h_lens_.get(), st_);
        };
        const auto attend = [&] {
            if (planned)
                lib_->run(q_.device(), xk_.get(), xv_.get(), o_.out.get(), o_.lse.get(), st_,
                          est ? est_out_.get() : nullptr, est ? est_lse_.get() : nullptr);
            else
                cuda::decode_attention(ds_, q_.device(), xk_.get(), xv_.get(), d_lens_.get(),
                                       est ? est_out_.get() : nullptr, est ? est_lse_.get() : nullptr, o_.out.get(),
                                       o_.lse.get(), dec_work_.get(), st_);
        };
        if (first && job_.warmup > 0) {  // the kernels once over the steady rows; the caches untouched
            std::fill(h_lens_.get(), h_lens_.get() + s_.bh(), S);
            cuda::copy_h2d_async(d_lens_.get(), h_lens_.get(), h_lens_.bytes(), st_);
            plan();
            for (int w = 0; w < job_.warmup; ++w) rank(), estimate(), attend();
            stream_.synchronize();
        }
        std::vector<std::vector<Placed>> misses((size_t)s_.bh());
        std::vector<int64_t> miss_tokens((size_t)s_.bh(), 0);
        reqs_.resize((size_t)s_.bh());
        if (device) {
            device_step(t, n, S, est, rank, estimate, plan, attend);
            return;
        }
        if (job_.launch_gate) gate_.hold(st_);  // released before the host waits for the ids
        e_start_.record(st_);
        rank();
        e_ranked_.record(st_);
        if (ranked && R_ > 0)
            cuda::copy_2d_async(h_ranked_.get(), (size_t)R_ * 4, ranked_.get(), (size_t)M_ * 4, (size_t)R_ * 4,
                                (size_t)s_.bh(), st_);
        e_ids_.record(st_);
        e_est0_.record(st_);
        estimate();
        e_est1_.record(st_);
        gate_.release();
        e_ids_.synchronize();  // the host looks up the clusters while the GPU estimates
        gate_timed_out_ = gate_.timed_out();
        const auto h0 = Clock::now();
        if (ranked) lookup(S, misses, miss_tokens);
        else {
            n_segs_ = 0;
            std::fill(h_lens_.get(), h_lens_.get() + s_.bh(), S);
        }
        cuda::copy_h2d_async(d_segs_.get(), h_segs_.get(), (size_t)n_segs_ * sizeof(CopySegment), st_);
        cuda::copy_h2d_async(d_lens_.get(), h_lens_.get(), h_lens_.bytes(), st_);
        const auto p0 = Clock::now();
        plan();
        plan_us_ = ms_since(p0) * 1e3;
        const double host_us = ms_since(h0) * 1e3;
        e_gather0_.record(st_);
        cuda::copy_segments(d_segs_.get(), n_segs_, s_.d, max_seg_, st_);
        e_gather1_.record(st_);
        attend();
        e_attend_.record(st_);
        int64_t longest = 0;
        const int n_adm = ranked ? admit(misses, longest) : 0;
        if (n_adm > 0) {
            cuda::copy_h2d_async(d_adm_.get(), h_adm_.get(), (size_t)n_adm * sizeof(CopySegment), st_);
            cuda::copy_segments(d_adm_.get(), n_adm, s_.d, longest, st_);
        }
        e_admit_.record(st_);
        o_.read_back(st_);
        if (ranked && R_ + E_ > 0)  // replica 0's ranking, for the selections
            cuda::copy_2d_async(h_rank0_.get(), (size_t)(R_ + E_) * 4, ranked_.get(), (size_t)M_ * 4,
                                (size_t)(R_ + E_) * 4, (size_t)s_.H, st_);
        stream_.synchronize();
        report(t, n, host_us, miss_tokens, est);
    }

    /// A step with nothing on the host's critical path (on_device()): the zones, the estimation, the
    /// execution buffers and their lengths on the device, FlashInfer's decode over them (its page table
    /// and split schedule built there too). With the KV in device memory there is no cache; with it in
    /// pinned host memory (device_lookup()) the gather takes hits from the cache's pool and misses from the
    /// store over PCIe by the device table, and the cache's update follows the attention (admit_device: its
    /// time is admit_us, counted by the one timing rule).
    template <class Rank, class Estimate, class Plan, class Attend>
    void device_step(int t, int n, int S, bool est, const Rank& rank, const Estimate& estimate, const Plan& plan,
                     const Attend& attend) {
        double host_us = 0;
        cuda::GatherShape gs;
        gs.bh = s_.bh(), gs.clusters = M_, gs.r = R_, gs.tokens = s_.tokens, gs.capacity = X_, gs.d = s_.d;
        const bool lookup = device_lookup();
        cuda::GatherCache gc;
        if (lookup) {
            gc.first = d_first_.get(), gc.blocks = d_blocks_.get(), gc.nb = NB_, gc.block_tokens = job_.block_tokens;
            gc.pool_k = pool_k_.get(), gc.pool_v = pool_v_.get(), gc.pool_rows = C_, gc.miss_rows = d_miss_.get();
        }
        const auto gather = [&] {  // (with steady_at the count is read on the device: the argument 0, fixed)
            cuda::gather_clusters(gs, gs.steady_at ? 0 : S, ranked_.get(), sizes_.get(), offsets_.get(), store_k(), store_v(), xk_.get(),
                                  xv_.get(), d_lens_.get(), st_, lookup ? &gc : nullptr);
        };
        const bool graphed = job_.step_graph;  // (the method's check keeps the asynchronous update out)
        if (graphed) {  // the steady rows' count to the device before the gate, as the queries
            h_steady_[0] = S;
            cuda::copy_h2d_async(d_steady_.get(), h_steady_.get(), sizeof(int32_t), st_);
            gs.steady_at = d_steady_.get();
        }
        if (job_.launch_gate) gate_.hold(st_);
        e_start_.record(st_);
        if (graphed) {  // one graph: no phase events inside it
            graph_.run((uint64_t)layout_epoch_, st_, [&] { rank(), estimate(), gather(), plan(), attend(); });
        } else {
            rank();
            e_ranked_.record(st_);
            e_ids_.record(st_);
            e_est0_.record(st_);
            estimate();
            e_est1_.record(st_);
            if (async_update() && pending_) {  // the last step's update, while the GPU ranks and estimates
                gate_.release();
                host_us = apply_update();
                pending_ = false;
                sync_steady(n);
                S = steady_;
            }
            e_gather0_.record(st_);
            gather();
            e_gather1_.record(st_);
            plan();
            attend();
        }
        e_attend_.record(st_);
        if (lookup && R_ > 0) {  // what the cache's update needs: the ranked ids and the misses' rows
            cuda::copy_2d_async(h_ranked_.get(), (size_t)R_ * 4, ranked_.get(), (size_t)M_ * 4, (size_t)R_ * 4,
                                (size_t)s_.bh(), st_);
            cuda::copy_d2h_async(h_miss_.get(), d_miss_.get(), (size_t)s_.bh() * R_ * sizeof(int32_t), st_);
        }
        e_ids_back_.record(st_);
        if (async_update()) e_admit_.record(st_);  // the step's part of the update: the read-back alone
        gate_.release();  // before the host waits for the ids
        std::vector<int64_t> miss_tokens((size_t)s_.bh(), 0);
        if (lookup && R_ > 0) {
            e_ids_back_.synchronize();
            collect_misses(miss_tokens);
            if (async_update()) pending_ = true;  // applied in the next step's window
            else host_us = apply_update();
        }
        if (!async_update()) e_admit_.record(st_);
        o_.read_back(st_);
        cuda::copy_d2h_async(h_lens_.get(), d_lens_.get(), h_lens_.bytes(), st_);  // for the work accounting
        if (R_ + E_ > 0)  // replica 0's ranking, for the selections
            cuda::copy_2d_async(h_rank0_.get(), (size_t)(R_ + E_) * 4, ranked_.get(), (size_t)M_ * 4,
                                (size_t)(R_ + E_) * 4, (size_t)s_.H, st_);
        stream_.synchronize();
        gate_timed_out_ = gate_.timed_out();
        plan_us_ = 0;
        // the ids and misses' rows read back for the update: after the step, off its critical path
        report(t, n, host_us, miss_tokens, est, /*host_lookups=*/false,
               lookup && R_ > 0 ? (double)s_.bh() * R_ * 2 * sizeof(int32_t) : 0.0, graphed);
    }

    /// host_us: the host's part of the step (the host path's lookups and plan) or, with device_lookup(), of
    /// the cache's update after it (inside admit_us); update_d2h: bytes read back for that update.
    void report(int t, int n, double host_us, const std::vector<int64_t>& miss_tokens, bool est,
                bool host_lookups = true, double update_d2h = 0, bool graphed = false) {
        GpuStep r;
        r.step = t, r.n = n;
        r.out = o_.h_out.get(), r.lse = o_.h_lse.get();
        r.index_build_ms = build_ms_;
        r.times.step_us = us_between(e_start_, e_attend_);
        if (graphed) {  // one graph: its phases are not timed
            r.times.attend_us = r.times.step_us;
            r.times.graph_us = graph_.last_capture_us();
        } else {
            r.times.select_us = us_between(e_start_, e_ranked_);
            r.times.estimate_us = est ? us_between(e_est0_, e_est1_) : 0.0;
            r.times.gather_us = us_between(e_gather0_, e_gather1_);
            r.times.attend_us = us_between(e_gather1_, e_attend_);
        }
        r.times.host_us = host_us;
        r.times.plan_us = plan_us_;
        r.times.gate_timed_out = gate_timed_out_;
        r.times.admit_us = us_between(e_attend_, e_admit_);
        const double tb = s_.token_bytes(), d = s_.d;
        const double pcie = job_.kv_on_gpu ? 0.0 : 1.0;  // misses from device memory cross no bus
        const bool ranked = M_ > 0 && R_ + E_ > 0;
        r.selections.resize((size_t)s_.H);
        r.head_h2d_bytes.assign((size_t)s_.H, 0.0);
        for (int h = 0; h < s_.H; ++h) {
            const WaveIndex& ix = heads_[(size_t)h].index();
            order_.clear();
            int valid_r = 0, valid_e = 0;
            for (int i = 0; ranked && i < R_ + E_; ++i) {
                const int c = h_rank0_[(size_t)h * (R_ + E_) + i];
                if (ix.size(c) == 0) continue;
                order_.push_back(c);
                (i < R_ ? valid_r : valid_e)++;
            }
            heads_[(size_t)h].fill_selection(order_, n, s_.g, tb, r.selections[(size_t)h]);
            r.footprints.push_back(heads_[(size_t)h].footprint(n, s_.d, 2.0));
            r.work.attend_bytes += h_lens_[(size_t)h] * tb;
            if (ranked) r.work.index_bytes += (double)M_ * d * 2 + (est ? valid_e * 2.0 * d * 2 : 0.0);
            r.work.h2d_bytes += pcie * (double)miss_tokens[(size_t)h] * tb;
            r.work.d2h_bytes += ranked && host_lookups ? R_ * 4.0 : 0.0;
            r.work.lookups += host_lookups ? valid_r : 0;
            r.head_h2d_bytes[(size_t)h] = pcie * (double)miss_tokens[(size_t)h] * tb;
        }
        for (int64_t m : miss_tokens) r.batch_h2d_bytes += pcie * (double)m * tb;
        r.batch_d2h_bytes = (ranked && host_lookups ? (double)s_.bh() * R_ * 4.0 : 0.0) + update_d2h;
        on_step_(r);
    }

    const GpuLayerJob& job_;
    const StepFn& on_step_;
    LayerShape s_;
    cuda::Stream stream_;
    void* st_;
    QueryStage q_;
    LayerOutputs o_;
    std::vector<WaveHead> heads_;
    double build_ms_ = 0;
    int M_ = 0, R_ = 0, E_ = 0;  ///< clusters (the row stride), retrieval and estimation budgets
    cuda::DeviceBuffer<uint16_t> cent_, vsum_;
    cuda::DeviceBuffer<int32_t> sizes_, offsets_, ranked_, est_ids_, d_lens_;  ///< [B*H, M] x3, [B*H, E], [B*H]
    cuda::DeviceBuffer<uint8_t> valid_;
    cuda::DeviceBuffer<float> agg_, est_out_, est_lse_, est_work_, dec_work_;
    cuda::DeviceBuffer<char> rank_work_;
    cuda::PinnedBuffer<int32_t> h_ranked_, h_rank0_, h_lens_;  ///< [B*H, R], [H, R+E] (replica 0), [B*H]
    cuda::PinnedBuffer<uint16_t> store_k_, store_v_;            ///< [B*H, N, d], cluster order (host KV)
    cuda::DeviceBuffer<uint16_t> dstore_k_, dstore_v_;          ///< the same on the device (kv_on_gpu)
    std::vector<int> stored_;                                   ///< store rows filled per head
    int X_ = 0, steady_ = 0;  ///< execution-buffer rows per (replica, head); steady rows at its front
    cuda::DeviceBuffer<uint16_t> xk_, xv_, pool_k_, pool_v_;
    cuda::PinnedBuffer<uint16_t> stage_k_, stage_v_;
    int64_t C_ = 0;  ///< pool rows per (replica, head) = cache capacity in token slots
    std::vector<GpuCacheMap> caches_;
    std::vector<std::vector<UnitRequest>> reqs_;
    cuda::PinnedBuffer<CopySegment> h_segs_, h_adm_, h_ssegs_;
    cuda::DeviceBuffer<CopySegment> d_segs_, d_adm_, d_ssegs_;
    int n_segs_ = 0;
    double plan_us_ = 0;  ///< this step's library planning (host)
    int64_t max_seg_ = 0;
    HostPool pool_;
    std::vector<std::vector<CopySegment>> bh_segs_;  ///< per (replica, head): this step's copy list
    DecodeShape ds_;
    std::unique_ptr<cuda::LibraryDecode> lib_;  ///< the library decode over the execution buffers, or none
    std::vector<int32_t> ids_;
    std::vector<int> order_;
    cuda::Event e_start_, e_ranked_, e_ids_, e_est0_, e_est1_, e_gather0_, e_gather1_, e_attend_, e_admit_, e_ids_back_;
    // the device lookup path (device_lookup()): the cache's table on the GPU
    std::vector<std::vector<int32_t>> first_;               ///< [H][M] each cluster's first block-table entry
    int NB_ = 0;                                            ///< block-table entries per (replica, head)
    cuda::DeviceBuffer<int32_t> d_first_, d_blocks_, d_miss_;  ///< [B*H, M], [B*H, NB], [B*H, R]
    cuda::PinnedBuffer<int32_t> h_miss_;                    ///< [B*H, R] the misses' rows, read back after a step
    cuda::PinnedBuffer<int64_t> h_at_;                      ///< the table's updates of a step: entries ...
    cuda::PinnedBuffer<int32_t> h_val_;                     ///< ... and their values (-1: evicted)
    cuda::DeviceBuffer<int64_t> d_at_;
    cuda::DeviceBuffer<int32_t> d_val_;
    CacheUpdateQueue updates_;  ///< the update's copies and table entries, on their own stream when asynchronous
    std::vector<std::vector<std::pair<int64_t, int32_t>>> bh_entries_;
    std::vector<std::vector<Placed>> pending_misses_;  ///< [B*H] the collected step's misses
    bool pending_ = false;                             ///< async_update(): a collected step not applied yet

    cuda::LaunchGate gate_;        ///< job_.launch_gate: the step's launches queued before it runs
    bool gate_timed_out_ = false;  ///< the last step's gate ended by its timeout
    // job_.step_graph: the device step as one CUDA graph, captured again after each layout() (the index grew:
    // the zones' sizes, the buffers and the cluster count its launches take), the steady rows' count read
    // from the device by the gather
    cuda::StepGraph graph_{"wave's step graph"};
    int layout_epoch_ = 0;  ///< layout() calls: the graph's key
    cuda::PinnedBuffer<int32_t> h_steady_{1};
    cuda::DeviceBuffer<int32_t> d_steady_{1};
};

}  // namespace

BuiltIndex build_wave_heads(const GpuLayerJob& job) {
    const LayerShape s = check_job(job);
    const auto t0 = Clock::now();
    KMeansFn km;
    if (job.kmeans_on_gpu)
        km = [](const float* x, int n, int d, const KMeansParams& p) { return cuda::segmented_kmeans_gpu(x, n, d, p); };
    BuiltIndex out;  // every sequence the job gives, sequence by sequence: shared by the batches
    const int n = job.sequences() * s.H;
    for (int i = 0; i < n; ++i) {
        const HeadSlice& hs = head_of(job, i / s.H, i % s.H);
        out.wave.emplace_back(job.wave, hs.layer, hs.kv_head, km);
    }
    // side by side on the host's cores: the k-means's final pass and the zones are host work (one core each
    // in the GPU-only build); segmented_kmeans_gpu runs one build's device part at a time
    for_each_item(n, 0, [&](int i) {
        const HeadSlice& hs = head_of(job, i / s.H, i % s.H);
        out.wave[(size_t)i].build({hs.keys.data(), hs.values.data(), s.prompt, s.d});
    });
    out.build_ms = ms_since(t0);
    return out;
}

void run_wave_layer(const GpuLayerJob& job, const StepFn& on_step) {
    WaveLayer w(job, on_step);
    w.run();
}

}  // namespace retro::gpu_run
