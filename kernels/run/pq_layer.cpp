// PQCache on the GPU (Zhang et al., SIGMOD 2025: the method `pq`, docs/methods/pq.md; docs/cuda.md
// "PQCache on the GPU") for every KV head of a layer and B replicas of the request:
//   build   on the host, by the CPU method's own head (methods/pq_head: ProductQuantizer's k-means over
//           the prompt's middle tokens with the method's seed, their codes); the codebooks and codes
//           uploaded, [B*H, m, 2^b, d/m] f32 and [B*H, tokens, m] uint16
//   append  each decode token on the host as the CPU method's append: the token leaving the local window
//           encoded with the same codebooks (bit for bit the CPU's codes), its code row uploaded (untimed)
//   KV      offloaded (the default, job.kv_on_gpu false; PQCache's setting): every (replica, KV head)'s K
//           and V in pinned host memory, the static tokens' rows and the GPU block cache in device memory
//           (run/pq_offload); or in device memory, fp16 [B*H, tokens, d] (the within-GPU-memory setting)
//   a step  pq_scores (lookup table per query head, every coded token's score) -> pq_select (the group's
//           ranking, the top-k, the lists sink + local + top-k) -> offloaded: pq_gather_rows (static rows,
//           cache hits from the pool, misses zero-copy from the pinned store) and FlashInfer's decode
//           over the execution buffers (decode_attention where the library does not take the shape), then the cache's update (the lists read back, the policy's step on the
//           host, the admitted 128-token units copied into the pool: admit_us; with job.async_update
//           applied at the next step while the GPU selects, PQCache's asynchronous update); in device memory:
//           FlashInfer's decode over the lists' token rows in place as one-token pages (decode_attention_pages
//           with page 1 where the library does not take the shape). One stream, CUDA events:
//           select_us = tables + scores + top-k.
// The lists equal the CPU method's id for id (kernels/pq/pq_checks.cpp; the backend tests
// PqMatchesTheCpuPqMethod, PqOffloadedMatchesTheCpuPqMethodAndTheSystemModel).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "methods/pq_head.hpp"
#include "run/pq_offload.hpp"
#include "run/layer_common.hpp"
#include "run/layer_runs.hpp"

namespace retro::gpu_run {

BuiltIndex build_pq_heads(const GpuLayerJob& job) {
    const LayerShape s = check_job(job);
    BuiltIndex out;
    out.pq = build_method_heads<PqHead>(job, s, job.pq.head, job.pq.seed, job.sequences(), out.build_ms);  // every sequence: shared by the batches
    return out;
}

void run_pq_layer(const GpuLayerJob& job, const StepFn& on_step) {
    const LayerShape s = check_job(job);
    const PqGpuParams& p = job.pq;
    if (p.head.gqa == PqGqa::softmax_sum)
        throw ParamError("pq on the GPU: gqa softmax_sum is not supported (max, mean, per_head)");

    // the CPU method's heads, built over the prompt as its build() does (or once for the layer: a copy, the
    // run appends the decode tokens to them)
    // [D * H]: sequence q's KV head h at q * H + h (s.head_index of a pair)
    if (job.built && (int)job.built->pq.size() < s.D * s.H)
        throw ParamError("cuda backend: job.built has " + std::to_string(job.built->pq.size()) + " pq heads for a job of " +
                         std::to_string(s.D) + " sequences of " + std::to_string(s.H));
    BuiltIndex built = job.built ? BuiltIndex{} : build_pq_heads(job);
    const std::vector<PqHead>& from = job.built ? job.built->pq : built.pq;
    std::vector<PqHead> heads(from.begin(), from.begin() + (ptrdiff_t)s.D * s.H);
    const double build_ms = job.built ? job.built->build_ms : built.build_ms;

    const PqHead& h0 = heads[0];
    const int s_end = h0.sink_end(), ce0 = h0.coded_end();
    // the layout at n visible tokens (every head alike: it depends on n only), as the CPU method's
    const auto coded_end_at = [&](int n) { return std::max(ce0, n - p.head.window); };
    const auto k_at = [&](int n) { return std::min(resolve_budget(p.head.k, n), coded_end_at(n) - s_end); };
    int width = 1;  // the widest list over the steps
    for (int t : job.steps) {
        const int n = s.prompt + t + 1;
        width = std::max(width, s_end + (n - coded_end_at(n)) + k_at(n));
    }

    cuda::PqShape ps;
    ps.seqs = s.bh(), ps.group = s.g, ps.d = s.d, ps.m = p.head.m, ps.nbits = p.head.nbits;
    ps.capacity = std::max(1, s.tokens);
    ps.rank = p.head.gqa == PqGqa::per_head ? cuda::PqRank::per_head
              : p.head.gqa == PqGqa::mean   ? cuda::PqRank::sum
                                            : cuda::PqRank::max;
    const int per = ps.per(), M = ps.m, K = ps.ksub();
    const bool offloaded = !job.kv_on_gpu;
    // offloaded: the attention over the execution buffers by FlashInfer's decode (as full attention's baseline
    // and wave's), read in place as whole 16-token pages: the lists' row stride rounded up to a page
    const bool library = library_takes(job, s.d, s.g / per, s.B * s.H * per);
    // in device memory it reads the lists' token rows where they lie: pages of one token (SGLang's layout)
    const int page = offloaded ? kLibraryPage : 1;
    if (library) width = (width + page - 1) / page * page;
    cuda::DecodeShape ds;  // per_head: every query head its own list
    ds.batch = s.B, ds.kv_heads = s.H * per, ds.group = s.g / per, ds.d = s.d, ds.capacity = width;
    ds.split = decode_split(ds.capacity, s.B * ds.kv_heads);
    // offloaded: the pinned rows per pair are whole cache units (an admission copies a unit whole)
    const int unit = std::max(1, job.unit_tokens);
    const size_t rows = offloaded ? ((size_t)s.tokens + unit - 1) / unit * unit : (size_t)s.tokens;
    const size_t book = (size_t)M * K * ps.dsub();
    const size_t kv_bytes = offloaded ? PqOffload::device_bytes(job, s, (int)rows, s_end, ce0, ps.lists(), width)
                                      : 2 * (size_t)s.bh() * rows * s.d * sizeof(uint16_t);
    const size_t need = kv_bytes + (size_t)s.bh() * book * sizeof(float) +
                        (size_t)s.bh() * ps.capacity * M * sizeof(uint16_t) +
                        (size_t)s.B * s.hq() * ((size_t)M * K + ps.capacity) * sizeof(float) +
                        cuda::pq_select_scratch_bytes(ps) + (size_t)ps.lists() * (width + 1) * sizeof(int32_t) +
                        cuda::decode_workspace_floats(ds) * sizeof(float) +
                        (size_t)s.B * s.hq() * (2 * (size_t)s.d + 2) * sizeof(float);
    require_device_memory("pq", s.B, need);
    const LayerKv kv = upload_layer_kv(job, s, rows, offloaded, "pq");
    std::unique_ptr<PqOffload> off;
    if (offloaded) off = std::make_unique<PqOffload>(job, s, kv, (int)rows, s_end, ce0, per, width);
    std::unique_ptr<cuda::LibraryDecode> lib;
    if (library) lib = std::make_unique<cuda::LibraryDecode>(ds, page);

    cuda::Stream stream;
    void* st = stream.get();
    QueryStage q(job, s);
    LayerOutputs o(s);
    cuda::DeviceBuffer<float> codebooks((size_t)s.bh() * book), lut((size_t)s.B * s.hq() * M * K);
    cuda::DeviceBuffer<float> scores((size_t)s.B * s.hq() * ps.capacity);
    cuda::DeviceBuffer<uint16_t> codes((size_t)s.bh() * ps.capacity * M);
    cuda::DeviceBuffer<uint8_t> scratch(cuda::pq_select_scratch_bytes(ps));
    const size_t lists0 = (size_t)s.H * per;  // replica 0's lists: its selection, read back for the harness
    SelectAttendStep timed((size_t)ps.lists(), width, lists0, ds);
    if (lib) timed.size_library(*lib, offloaded ? 0 : width, stream);

    // the host's codebooks and codes into every replica's rows, each pair from its sequence's head: codes
    // [from, to) of each head
    std::vector<int> books_of(heads.size(), 0);  // trainings uploaded per (sequence, KV head)
    const auto upload_codes = [&](int from, int to) {
        double bytes = 0;
        std::vector<bool> books(heads.size());
        for (size_t k = 0; k < heads.size(); ++k) books[k] = heads[k].trainings() != books_of[k];
        for (int pair = 0; pair < s.bh(); ++pair) {
            const size_t k = (size_t)s.head_index(pair);
            const PqHead& ph = heads[k];
            if (books[k]) cuda::copy_h2d(codebooks.get() + pair * book, ph.quantizer().centroids(0), book * sizeof(float));
            if (to > from)
                cuda::copy_h2d(codes.get() + ((size_t)pair * ps.capacity + from) * M, ph.codes().data() + (size_t)from * M,
                               (size_t)(to - from) * M * sizeof(uint16_t));
            bytes += (books[k] ? book * sizeof(float) : 0) + (size_t)std::max(0, to - from) * M * sizeof(uint16_t);
        }
        for (size_t k = 0; k < heads.size(); ++k) books_of[k] = heads[k].trainings();
        return bytes;
    };
    int uploaded = h0.coded_end() - s_end;  // codes rows on the device
    upload_codes(0, uploaded);

    const double token_bytes = s.token_bytes();
    std::vector<Selection> sels((size_t)s.H);
    std::vector<Footprint> fps((size_t)s.H);
    std::vector<std::vector<int32_t>> found((size_t)per);
    int appended = -1;  // the last decode step appended
    for (size_t i = 0; i < job.steps.size(); ++i) {
        const int t = job.steps[i], n = s.prompt + t + 1;
        for (int u = appended + 1; u <= t; ++u)  // the CPU method's append of every decode token
            for (size_t k = 0; k < heads.size(); ++k) {
                const HeadSlice& hs = head_of(job, (int)k / s.H, (int)k % s.H);
                heads[k].append(KVView{hs.keys.data(), hs.values.data(), s.prompt + u + 1, s.d}, s.prompt + u);
            }
        appended = t;
        for (size_t k = 0; k < heads.size(); ++k) {  // and what its select does first (a no-op after the appends)
            const HeadSlice& hs = head_of(job, (int)k / s.H, (int)k % s.H);
            heads[k].advance(KVView{hs.keys.data(), hs.values.data(), n, s.d});
            if (heads[k].coded_end() != coded_end_at(n))
                throw Error("pq on the GPU: head " + std::to_string(k) + "'s coded tokens differ from the layout's");
        }
        const int coded = coded_end_at(n) - s_end;
        const double codes_h2d = upload_codes(uploaded, coded);
        uploaded = coded;
        cuda::PqLists l;
        l.n = n, l.sink_end = s_end, l.coded_end = coded_end_at(n), l.k = k_at(n), l.kv_rows = (int)rows, l.width = width;
        q.stage(t, st);
        const auto select = [&] {
            cuda::pq_scores(ps, q.device(), codebooks.get(), codes.get(), coded, lut.get(), scores.get(), st);
            cuda::pq_select(ps, scores.get(), l, timed.table(), timed.lens(), scratch.get(), st);
        };
        const auto attend = [&] {
            if (lib && off) {  // planned on the device from the lists' lengths: no host round trip
                lib->plan_device(timed.lens(), st);
                lib->run(q.device(), off->xk(), off->xv(), o.out.get(), o.lse.get(), st);
            } else if (lib) {  // the lists' token rows as one-token pages of the KV pool, in place
                lib->plan_device(timed.lens(), st, 0, timed.table(), width);
                lib->run(q.device(), kv.K, kv.V, o.out.get(), o.lse.get(), st);
            } else if (off) {
                cuda::decode_attention(ds, q.device(), off->xk(), off->xv(), timed.lens(), nullptr, nullptr,
                                       o.out.get(), o.lse.get(), timed.work(), st);
            } else {
                cuda::decode_attention_pages(ds, q.device(), kv.K, kv.V, timed.table(), 1, width, timed.lens(),
                                             o.out.get(), o.lse.get(), timed.work(), st);
            }
        };
        const int fixed = s_end + (n - l.coded_end);
        PqOffload::Update upd;
        PqOffload::Applied applied;
        StepHooks hooks;
        if (off) {
            hooks.gather = [&] { off->gather(timed.table(), timed.lens(), l.coded_end, st); };
            // the last step's update while the GPU selects (async_update), else this step's after its attention
            if (job.async_update && off->pending())
                hooks.before_gather = [&] {
                    applied = off->apply(stream);
                    return applied.host_us;
                };
            hooks.after_attend = [&] {
                upd = off->collect(timed.table(), fixed, l.k, n, stream);
                if (job.async_update) return upd.host_us;
                applied = off->apply(stream);
                return upd.host_us + applied.host_us;
            };
        }
        GpuStep r = timed.run(job, t, n, i == 0, select, attend, lists0 * width, o, stream, hooks);
        r.index_build_ms = build_ms;
        double attended = 0;
        for (int h = 0; h < s.H; ++h) {
            Selection& sel = sels[(size_t)h];
            sel.clear();
            std::vector<std::vector<int32_t>> lists((size_t)per);
            for (int j = 0; j < per; ++j) {  // list (replica 0, head h, member j): its tokens in table order
                const size_t list = (size_t)h * per + j;
                const int32_t base = (int32_t)(h * rows);  // sequence h of replica 0
                std::vector<int32_t>& ids = lists[(size_t)j];
                ids.resize((size_t)timed.h_lens()[list]);
                for (int k = 0; k < timed.h_lens()[list]; ++k) ids[(size_t)k] = timed.h_table()[list * width + k] - base;
                found[(size_t)j].assign(ids.begin() + std::min((int)ids.size(), fixed), ids.end());
                attended += timed.h_lens()[list] * token_bytes;
            }
            // the CPU method's accounting of these retrieved tokens (fetch order, scan_ops, h2d/d2h bytes of
            // its offloaded model), then the GPU's own lists as the exact ones
            heads[(size_t)h].finish(n, found, sel);
            sel.exact = std::move(lists);
            fps[(size_t)h] = heads[(size_t)h].footprint();
        }
        r.selections = sels;
        r.footprints = fps;
        r.work.attend_bytes = attended;
        // the codes read by the scoring and the codebooks by the tables, replica 0
        r.work.index_bytes = (double)s.H * ((double)coded * M * sizeof(uint16_t) + (double)book * sizeof(float));
        // the newly coded tokens' codes (and codebooks when first fit); offloaded: with the tokens the gather read
        // from host memory (every replica's) and the admitted units' copies into the pool
        r.batch_h2d_bytes = codes_h2d;
        r.head_h2d_bytes.assign((size_t)s.H, 0.0);  // in device memory: no KV over PCIe
        if (off) {
            for (int h = 0; h < s.H; ++h) r.head_h2d_bytes[(size_t)h] = (double)upd.miss_tokens[(size_t)h] * token_bytes;
            for (int64_t m : upd.miss_tokens) r.batch_h2d_bytes += (double)m * token_bytes;
            for (double b : r.head_h2d_bytes) r.work.h2d_bytes += b;
            r.batch_h2d_bytes += applied.fill_bytes;  // the units this step admitted (async: the last step's)
            r.batch_d2h_bytes = upd.d2h_bytes;  // the lengths and lists read back for the cache's update
        }
        on_step(r);
    }
}

}  // namespace retro::gpu_run
