// MagicPIG on the GPU and the host (Chen et al., ICLR 2025: the method `magicpig`, docs/methods/magicpig.md
// "On the GPU"; docs/cuda.md "MagicPIG on the GPU") for every KV head of a layer and B replicas of the request,
// in the paper's split:
//   build   on the host, by the CPU method's own head (methods/magicpig_head): the offloaded prompt keys
//           [sink, prompt - window) centered and hashed into L tables of K bits (its BLAS GEMM: the keys' codes
//           are the CPU's own), their norms; the hyperplanes uploaded [H, d, K*L] f32
//   KV      the static tokens (sink + local window + every decode token) in device memory, fp16 [B*H, rows, d];
//           the offloaded tokens' KV in host memory (the slices' float32 rows), never copied to the GPU
//   a step  GPU: magicpig_hash (every query head's L codes, bit for bit the CPU's), the codes read back to the
//           host (d2h); then on the GPU the static rows' attention (StaticAttention: FlashInfer, one-token pages), while on the
//           host's cores (a pool over (replica, KV head), job.host_threads) the method's own collision test,
//           sampling and weights (MagicPigHead::sample) and the importance-weighted attention over the
//           sampled tokens (partial_attention_ids with the log weights, what the harness attends); the two
//           partial results merged by their LSE on the host.
// Times (the step's GPU work queued behind the launch gate): select_us = the hashing kernel (CUDA events);
// attend_us = the static attention (events); host_us = the host part's wall time; step_us = the step's wall
// time from the hashing launch to the merged outputs (the static attention overlaps the host part, the codes'
// read-back and the merge do not).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>
#include <string>

#include "attention/attention.hpp"
#include "methods/magicpig_head.hpp"
#include "run/host_pool.hpp"
#include "run/layer_common.hpp"
#include "run/layer_runs.hpp"
#include "run/static_split.hpp"

namespace retro::gpu_run {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

void run_magicpig_layer(const GpuLayerJob& job, const StepFn& on_step) {
    const LayerShape s = check_job(job);
    const MagicPigGpuParams& p = job.magicpig;
    const int K = p.head.hash.K, L = p.head.hash.L, KL = K * L;

    // the CPU method's heads, built over the prompt as its build() does
    double build_ms = 0;
    const std::vector<MagicPigHead> heads = build_method_heads<MagicPigHead>(job, s, p.head, p.seed, s.D, build_ms);
    const int ib = heads[0].sink_end(), ie = heads[0].offload_end();  // every head alike: they depend on the prompt
    const bool sampled = !heads[0].empty();

    // the static rows of a sequence: row r < ib is token r, row r >= ib token ie + (r - ib)
    const int srows = ib + (s.tokens - ie);
    cuda::DecodeShape ds;
    ds.batch = s.B, ds.kv_heads = s.H, ds.group = s.g, ds.d = s.d, ds.capacity = srows;
    ds.split = decode_split(ds.capacity, s.bh());
    const size_t need = StaticKv::bytes_for(s, ib, ie) + (size_t)s.D * s.H * s.d * KL * sizeof(float) +
                        (size_t)s.B * s.hq() * L * sizeof(uint32_t) + (size_t)s.bh() * (srows + 1) * sizeof(int32_t) +
                        cuda::decode_workspace_floats(ds) * sizeof(float) +
                        (size_t)s.B * s.hq() * (2 * (size_t)s.d + 2) * sizeof(float);
    require_device_memory("magicpig", s.B, need);
    const StaticKv skv = upload_static_kv(job, s, ib, ie);
    cuda::MagicpigShape ms;
    // one hyperplane set per (sequence, KV head): pair b * H + h hashes with set (b * H + h) % (D * H) =
    // (b % D) * H + h, its sequence's head
    ms.seqs = s.bh(), ms.heads = s.D * s.H, ms.group = s.g, ms.d = s.d, ms.K = K, ms.L = L;
    cuda::DeviceBuffer<float> planes(std::max<size_t>(1, (size_t)s.D * s.H * s.d * KL));
    if (sampled && KL > 0)
        for (size_t x = 0; x < heads.size(); ++x)
            cuda::copy_h2d(planes.get() + x * s.d * KL, heads[x].tables().planes(), (size_t)s.d * KL * sizeof(float));
    cuda::DeviceBuffer<uint32_t> codes((size_t)s.B * s.hq() * L);
    cuda::PinnedBuffer<uint32_t> h_codes(codes.size());
    cuda::DeviceBuffer<int32_t> table((size_t)s.bh() * srows), lens((size_t)s.bh());
    {
        std::vector<int32_t> tab(table.size());
        for (size_t i = 0; i < tab.size(); ++i) tab[i] = (int32_t)i;  // list seq: rows seq * srows + r, in order
        cuda::copy_h2d(table.get(), tab.data(), tab.size() * sizeof(int32_t));
    }
    cuda::PinnedBuffer<int32_t> h_lens((size_t)s.bh());
    StaticAttention static_att(job, ds);

    cuda::LaunchGate gate;  // before the stream: destroyed after it, so no gate queued on the stream outlives its flag
    cuda::Stream stream;
    void* st = stream.get();
    QueryStage q(job, s);
    LayerOutputs o(s);
    cuda::Event e0, e1, e2, e3;
    HostPool pool(job.host_threads);
    const int items = s.bh(), g = s.g, d = s.d;
    const float scale = 1.0f / std::sqrt((float)d);
    std::vector<MagicPigScratch> scratch((size_t)items);
    // per (replica, KV head, member): the sampled ids and log weights, the host's partial attention
    std::vector<std::vector<int32_t>> ids((size_t)items * g);
    std::vector<std::vector<float>> lws((size_t)items * g);
    std::vector<PartialAttention> parts((size_t)items * g);
    std::vector<size_t> visited((size_t)items);
    std::vector<float> out((size_t)s.B * s.hq() * d), lse((size_t)s.B * s.hq());
    const size_t code_bytes = codes.size() * sizeof(uint32_t);

    const double token_bytes = s.token_bytes();
    std::vector<Selection> sels((size_t)s.H);
    std::vector<Footprint> fps((size_t)s.H);
    for (size_t i = 0; i < job.steps.size(); ++i) {
        const int t = job.steps[i], n = s.prompt + t + 1, fixed = ib + (n - ie);
        for (int k = 0; k < items; ++k) h_lens[(size_t)k] = fixed;
        cuda::copy_h2d_async(lens.get(), h_lens.get(), h_lens.bytes(), st);
        q.stage(t, st);
        const auto hash = [&] {
            if (sampled) cuda::magicpig_hash(ms, q.device(), planes.get(), codes.get(), st);
        };
        const auto attend = [&] { static_att.run(q.device(), skv, table.get(), lens.get(), fixed, o.out.get(), o.lse.get(), st); };
        if (i == 0) {
            static_att.prepare(table.get(), lens.get(), fixed, stream);
            for (int w = 0; w < job.warmup; ++w) hash(), attend();
        }
        stream.synchronize();

        const auto step0 = Clock::now();
        if (job.launch_gate) gate.hold(st);  // the step's GPU work queued first, then run back to back: the
        e0.record(st);                       // phases without the host's launch calls
        hash();
        e1.record(st);
        if (sampled) cuda::copy_d2h_async(h_codes.get(), codes.get(), code_bytes, st);
        e2.record(st);  // the codes on the host
        attend();
        e3.record(st);
        o.read_back(st);
        gate.release();
        if (sampled) pool.wake();  // the workers spin while the codes come (a sleeping one takes tens of us to wake)
        e2.synchronize();
        const auto host0 = Clock::now();
        pool.for_each(items, sampled, [&](int k) {  // (replica b, KV head h) = (k / H, k % H), sequence b % D
            const HeadSlice& hs = head_of(job, s.seq(k / s.H), k % s.H);
            const MagicPigHead& head = heads[(size_t)s.head_index(k)];
            visited[(size_t)k] = 0;
            for (int j = 0; j < g; ++j) {
                const size_t m = (size_t)k * g + j;
                const float* qh = hs.query(j, t);
                ids[m].clear(), lws[m].clear();
                if (sampled) visited[(size_t)k] += head.sample(qh, h_codes.get() + m * L, scratch[(size_t)k], ids[m], lws[m]);
                parts[m] = partial_attention_ids(qh, hs.keys.data(), hs.values.data(), std::span<const int32_t>(ids[m]), d,
                                                 scale, lws[m].data());
            }
        });
        const double host_us = us_since(host0);
        stream.synchronize();
        merge_layer_partials(o, parts, d, out.data(), lse.data());
        const double step_us = us_since(step0);

        GpuStep r;
        r.step = t, r.n = n;
        r.out = out.data(), r.lse = lse.data();
        r.times.select_us = sampled ? us_between(e0, e1) : 0.0;
        r.times.attend_us = us_between(e2, e3);
        r.times.host_us = host_us;
        r.times.step_us = step_us;
        r.times.gate_timed_out = gate.timed_out();
        r.index_build_ms = build_ms;
        double lookups = 0;
        for (int h = 0; h < s.H; ++h) {  // replica 0's selections, as the CPU method emits them
            Selection& sel = sels[(size_t)h];
            sel.clear();
            sel.exact.resize((size_t)g);
            sel.exact_log_weight.resize((size_t)g);
            for (int j = 0; j < g; ++j) {
                const size_t m = (size_t)h * g + j;
                heads[(size_t)h].static_tokens(n, sel.exact[(size_t)j], sel.exact_log_weight[(size_t)j]);
                sel.exact[(size_t)j].insert(sel.exact[(size_t)j].end(), ids[m].begin(), ids[m].end());
                sel.exact_log_weight[(size_t)j].insert(sel.exact_log_weight[(size_t)j].end(), lws[m].begin(), lws[m].end());
            }
            heads[(size_t)h].account(sel);
            fps[(size_t)h] = heads[(size_t)h].footprint(n);
            lookups += (double)visited[(size_t)h];
        }
        r.selections = sels;
        r.footprints = fps;
        r.work.attend_bytes = (double)s.H * fixed * token_bytes;              // the static KV, replica 0
        r.work.index_bytes = sampled ? (double)s.H * d * KL * sizeof(float) : 0;  // the hyperplanes
        r.work.d2h_bytes = (sampled ? (double)s.hq() * L * sizeof(uint32_t) : 0) +  // the codes, the GPU's partials
                           (double)s.hq() * (d + 1) * sizeof(float);
        r.work.lookups = lookups;  // bucket entries walked by the host, replica 0
        r.batch_d2h_bytes = (sampled ? (double)code_bytes : 0) + (double)(o.h_out.bytes() + o.h_lse.bytes());
        r.batch_h2d_bytes = 0;
        r.head_h2d_bytes.assign((size_t)s.H, 0.0);  // no KV over PCIe: the sampled tokens are attended on the host
        on_step(r);
    }
}

}  // namespace retro::gpu_run
