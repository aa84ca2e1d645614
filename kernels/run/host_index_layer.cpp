// The CPU-index methods on the GPU footing (issue 41 #3; docs/cuda.md "The CPU-index methods on the GPU"):
// FAISS's flat, IVF and HNSW indexes (faiss_flat, faiss_ivf, faiss_hnsw with placement "cpu_attention") and
// RetrievalAttention's RoarGraph (retrieval_attention), for every KV head of a layer and B replicas of the
// request, in RetrievalAttention's split (its paper, §3.3 and Figure 6):
//   build   on the host, by the CPU method itself (job.host_index.make: the registry's method with the
//           run's parameters) over the prompt, one instance per (replica, KV head): each of the batch's D
//           distinct sequences' built over its own prompt (side by side on the host's cores), the other replicas copies of their sequence's
//           (Method::clone_built; a method without one is built again). Each replica has its own index, as
//           B requests would: their host memory is checked before the copies.
//   KV      the static pattern (the first ib = min(sink, prompt) tokens; the prompt's last `window` tokens
//           from ie = max(ib, prompt - window); every decode token) in device memory, fp16 [B*H, rows, d];
//           the indexed tokens' KV stays in host memory (the slices' float32 rows), never on the GPU. With
//           FAISS's decode_tokens "index" (job.host_index.window_slides) a token leaving the window moves
//           to the index: the GPU's part at n visible tokens is [0, ib) and [max(ie, n - window), n).
//   a step  GPU: the queries read back to the host (d2h, what the model's GPU produced), then
//           the static rows' attention (StaticAttention: FlashInfer, one-token pages); meanwhile on the host's cores (a pool
//           over (replica, KV head), job.host_threads) the CPU method's own select (its index search, the
//           lists static pattern + retrieved) and the attention over each list's retrieved tokens
//           (partial_attention_ids, what the harness attends); the two partial results merged by their LSE
//           on the host. Every list is checked to hold the whole static pattern, so that the split attends
//           exactly the method's selection.
// Times: attend_us = the static attention (CUDA events; the step's GPU work queued behind the launch gate);
// host_us = the host part's wall time (search and attention); step_us = the step's wall time from the queries'
// read-back to the merged outputs (the static attention overlaps the host part; the read-back and the merge do
// not). select_us = 0: nothing of the selection runs on the GPU. The appends between selected steps (FAISS's
// index insertions) run untimed.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <span>
#include <string>

#include "attention/attention.hpp"
#include "core/memory.hpp"
#include "core/threads.hpp"
#include "run/host_pool.hpp"
#include "run/layer_common.hpp"
#include "run/layer_runs.hpp"
#include "run/static_split.hpp"

namespace retro::gpu_run {

namespace {

using Clock = std::chrono::steady_clock;

/// The CPU method's instance as build_method_heads builds a head: made from the run's parameters
/// (job.host_index.make), built over the prompt.
struct MethodHead {
    std::unique_ptr<Method> m;
    explicit MethodHead(const HostIndexGpuParams& p) : m(p.make()) {}
    void build(const MethodContext& ctx, const KVView& kv) { m->build(ctx, kv); }
};

/// The CPU method's instances for the KV heads of the job's first `sequences` sequences ([sequences * H],
/// sequence by sequence), built side by side on the host's cores (build_method_heads: FAISS's and RoarGraph's
/// OpenMP held at one thread each while more than one runs, so the indexes are those built one by one;
/// RoarGraph's serial enhancement made the 8 heads of one 128K sequence ~8 of its builds in a row before);
/// build_ms: their wall time.
std::vector<std::unique_ptr<Method>> build_heads(const GpuLayerJob& job, const LayerShape& s, int sequences,
                                                 double& build_ms) {
    std::vector<std::unique_ptr<Method>> m;
    for (MethodHead& x : build_method_heads<MethodHead>(job, s, job.host_index, job.host_index.seed, sequences, build_ms))
        m.push_back(std::move(x.m));
    return m;
}

/// One instance of the CPU method per (replica b, KV head h) at b * H + h, each over its sequence's prompt:
/// copies (Method::clone_built) of the layer's instances the runner built once for every batch point
/// (job.built->host), or, without them, the first D replicas' built here (build_ms: their wall time) and each
/// further replica a copy of its sequence's. A method without clone_built is built again for each copy.
std::vector<std::unique_ptr<Method>> build_instances(const GpuLayerJob& job, const LayerShape& s, int ib, int ie,
                                                     double& build_ms) {
    const HostIndexGpuParams& p = job.host_index;
    std::vector<std::unique_ptr<Method>> m((size_t)s.bh());
    std::vector<const Method*> built((size_t)s.D * s.H);  // each sequence's built instance
    const bool shared = job.built && job.built->host.size() >= built.size();
    int first_copy = 0;  // the replicas from here on are copies
    if (shared) {
        for (size_t i = 0; i < built.size(); ++i) built[i] = job.built->host[i].get();
        build_ms = job.built->build_ms;
    } else {
        std::vector<std::unique_ptr<Method>> own = build_heads(job, s, s.D, build_ms);
        for (size_t i = 0; i < built.size(); ++i) built[i] = own[i].get(), m[i] = std::move(own[i]);
        first_copy = s.D;
    }
    if (first_copy == s.B) return m;
    // the copies' host memory: the method's CPU footprint plus a copy of the indexed keys (FAISS's flat storage;
    // RoarGraph keeps none: an upper bound) per KV head and sequence
    double per_seq = 0;
    for (int h = 0; h < s.H; ++h) per_seq += built[(size_t)h]->footprint().cpu_bytes + (double)(ie - ib) * s.d * sizeof(float);
    const double need = per_seq * (s.B - first_copy), avail = available_memory_bytes();
    if (need > 0.8 * avail)
        throw GpuMemoryError(job.method + " at batch " + std::to_string(s.B) + " needs ~" +
                             std::to_string((long long)(need / (1 << 20))) + " MiB of host memory for " +
                             std::to_string(s.B - first_copy) + " sequences' indexes; " +
                             std::to_string((long long)(avail / (1 << 20))) + " MiB available");
    for (int b = first_copy; b < s.B; ++b)
        for (int h = 0; h < s.H; ++h) {
            const size_t src = (size_t)s.head_index(b * s.H + h);  // its sequence's instance
            std::unique_ptr<Method> fresh = p.make();
            std::unique_ptr<Method> copy = built[src]->clone_built(*fresh);
            if (!copy) {
                const HeadSlice& hs = head_of(job, s.seq(b), h);
                fresh->build(head_context(hs, p.seed), KVView{hs.keys.data(), hs.values.data(), s.prompt, s.d});
                copy = std::move(fresh);
            }
            m[(size_t)b * s.H + h] = std::move(copy);
        }
    return m;
}

}  // namespace

BuiltIndex build_host_index_heads(const GpuLayerJob& job) {
    const LayerShape s = check_job(job);
    BuiltIndex out;
    for (auto& x : build_heads(job, s, job.sequences(), out.build_ms)) out.host.push_back(std::move(x));
    return out;
}

void run_host_index_layer(const GpuLayerJob& job, const StepFn& on_step) {
    const LayerShape s = check_job(job);
    const HostIndexGpuParams& p = job.host_index;
    const int ib = std::min(p.sink, s.prompt), ie = std::max(ib, s.prompt - p.window);
    // the first token of the static tail at n visible tokens
    const auto tail_at = [&](int n) { return p.window_slides ? std::max(ie, n - p.window) : ie; };

    const int srows = ib + (s.tokens - ie);
    cuda::DecodeShape ds;
    ds.batch = s.B, ds.kv_heads = s.H, ds.group = s.g, ds.d = s.d, ds.capacity = srows;
    ds.split = decode_split(ds.capacity, s.bh());
    const size_t need = StaticKv::bytes_for(s, ib, ie) + (size_t)s.bh() * (srows + 1) * sizeof(int32_t) +
                        cuda::decode_workspace_floats(ds) * sizeof(float) +
                        (size_t)s.B * s.hq() * (3 * (size_t)s.d + 2) * sizeof(float);
    require_device_memory(job.method, s.B, need);

    double build_ms = 0;
    std::vector<std::unique_ptr<Method>> methods = build_instances(job, s, ib, ie, build_ms);
    const StaticKv skv = upload_static_kv(job, s, ib, ie);
    cuda::DeviceBuffer<int32_t> table((size_t)s.bh() * srows), lens((size_t)s.bh());
    std::vector<int32_t> h_tab(table.size());
    cuda::PinnedBuffer<int32_t> h_lens((size_t)s.bh());
    StaticAttention static_att(job, ds);

    cuda::LaunchGate gate;  // before the stream: destroyed after it, so no gate queued on the stream outlives its flag
    cuda::Stream stream;
    void* st = stream.get();
    QueryStage q(job, s);
    LayerOutputs o(s);
    cuda::PinnedBuffer<float> h_q((size_t)s.B * s.hq() * s.d);  // the queries as the host reads them back
    cuda::Event e0, e1, e2;
    HostPool pool(job.host_threads);
    const int items = s.bh(), g = s.g, d = s.d;
    const float scale = 1.0f / std::sqrt((float)d);
    std::vector<Selection> sel((size_t)items);
    std::vector<PartialAttention> parts((size_t)items * g);
    std::vector<std::vector<int32_t>> host_ids((size_t)items);
    std::vector<std::vector<float>> host_lw((size_t)items);
    std::vector<float> out((size_t)s.B * s.hq() * d), lse((size_t)s.B * s.hq());

    const double token_bytes = s.token_bytes();
    std::vector<Selection> sels((size_t)s.H);
    std::vector<Footprint> fps((size_t)s.H);
    int last = -1, tail = -1;
    for (size_t i = 0; i < job.steps.size(); ++i) {
        const int t = job.steps[i], n = s.prompt + t + 1, w0 = tail_at(n), fixed = ib + (n - w0);
        // the decode tokens since the last selected step, to every instance (FAISS's insertions), untimed
        pool.for_each(items, items > 1, [&](int k) {
            const HeadSlice& hs = head_of(job, s.seq(k / s.H), k % s.H);
            for (int u = last + 1; u <= t; ++u)
                methods[(size_t)k]->append(KVView{hs.keys.data(), hs.values.data(), s.prompt + u + 1, d}, s.prompt + u);
        });
        last = t;
        if (w0 != tail) {  // list seq: rows [0, ib) and the tail's rows from token w0, in order
            tail = w0;
            for (int k = 0; k < items; ++k) {
                int* row = h_tab.data() + (size_t)k * srows;
                int c = 0;
                for (int r = 0; r < ib; ++r) row[c++] = k * srows + r;
                for (int r = ib + (w0 - ie); r < srows; ++r) row[c++] = k * srows + r;
            }
            cuda::copy_h2d(table.get(), h_tab.data(), h_tab.size() * sizeof(int32_t));
        }
        for (int k = 0; k < items; ++k) h_lens[(size_t)k] = fixed;
        cuda::copy_h2d_async(lens.get(), h_lens.get(), h_lens.bytes(), st);
        q.stage(t, st);
        const auto attend = [&] { static_att.run(q.device(), skv, table.get(), lens.get(), fixed, o.out.get(), o.lse.get(), st); };
        if (i == 0) {
            static_att.prepare(table.get(), lens.get(), fixed, stream);
            for (int w = 0; w < job.warmup; ++w) attend();
        }
        stream.synchronize();

        const auto step0 = Clock::now();
        if (job.launch_gate) gate.hold(st);  // the step's GPU work queued first, then run back to back: attend_us
        e0.record(st);                       // without the host's launch calls (the split's planning kernels)
        cuda::copy_d2h_async(h_q.get(), q.device(), h_q.bytes(), st);
        e1.record(st);  // the queries on the host
        attend();
        e2.record(st);
        o.read_back(st);
        gate.release();
        e1.synchronize();
        const auto host0 = Clock::now();
        pool.for_each(items, items > 1, [&](int k) {  // (replica b, KV head h) = (k / H, k % H)
            const int b = k / s.H, h = k % s.H;
            const HeadSlice& hs = head_of(job, s.seq(b), h);
            const float* qk = h_q.get() + ((size_t)b * s.H + h) * g * d;
            Selection& x = sel[(size_t)k];
            x.clear();
            methods[(size_t)k]->select(qk, t, KVView{hs.keys.data(), hs.values.data(), n, d}, x);
            if (x.exact.empty() || !x.estimated.empty())
                throw Error(job.method + " on the GPU: the method's selection at step " + std::to_string(t) +
                            " is not a list of exact tokens (the split attends exact tokens only)");
            std::vector<int32_t>& ids = host_ids[(size_t)k];
            std::vector<float>& lw = host_lw[(size_t)k];
            for (int j = 0; j < g; ++j) {
                const std::span<const int32_t> list = x.exact_for(j);
                const float* w = x.log_weight_for(j);
                ids.clear(), lw.clear();
                int on_gpu = 0;
                for (size_t e = 0; e < list.size(); ++e) {
                    const int32_t id = list[e];
                    if (id < ib || id >= w0) {
                        ++on_gpu;
                        if (w && w[e] != 0.0f)
                            throw Error(job.method + " on the GPU: a static token with a weight (the GPU attends them unweighted)");
                    } else {
                        ids.push_back(id);
                        if (w) lw.push_back(w[e]);
                    }
                }
                if (on_gpu != fixed)
                    throw Error(job.method + " on the GPU: query head " + std::to_string(h * g + j) + "'s list at step " +
                                std::to_string(t) + " holds " + std::to_string(on_gpu) + " of the " + std::to_string(fixed) +
                                " static tokens the GPU attends (sink " + std::to_string(ib) + ", tail from " +
                                std::to_string(w0) + "): the split would not attend the method's selection");
                parts[(size_t)k * g + j] = partial_attention_ids(qk + (size_t)j * d, hs.keys.data(), hs.values.data(),
                                                                 std::span<const int32_t>(ids), d, scale,
                                                                 w ? lw.data() : nullptr);
            }
        });
        const double host_us = us_since(host0);
        stream.synchronize();
        merge_layer_partials(o, parts, d, out.data(), lse.data());
        const double step_us = us_since(step0);

        GpuStep r;
        r.step = t, r.n = n;
        r.out = out.data(), r.lse = lse.data();
        r.times.attend_us = us_between(e1, e2);
        r.times.host_us = host_us;
        r.times.step_us = step_us;
        r.times.gate_timed_out = gate.timed_out();
        r.index_build_ms = build_ms;
        for (int h = 0; h < s.H; ++h) {  // replica 0's selections, as the CPU method made them
            sels[(size_t)h] = sel[(size_t)h];
            fps[(size_t)h] = methods[(size_t)h]->footprint();
        }
        r.selections = sels;
        r.footprints = fps;
        r.work.attend_bytes = (double)s.H * fixed * token_bytes;  // the static KV, replica 0
        r.work.d2h_bytes = (double)s.hq() * d * sizeof(float) +     // the queries, the GPU's partials
                           (double)s.hq() * (d + 1) * sizeof(float);
        r.batch_d2h_bytes = (double)(h_q.bytes() + o.h_out.bytes() + o.h_lse.bytes());
        r.batch_h2d_bytes = 0;
        r.head_h2d_bytes.assign((size_t)s.H, 0.0);  // no KV over PCIe: the retrieved tokens are attended on the host
        on_step(r);
    }
}

}  // namespace retro::gpu_run
