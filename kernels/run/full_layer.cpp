// Full attention on the GPU: every KV head of the layer for B replicas, all of their KV as fp16 in GPU
// memory ([B*H, N, d]; offloaded: in pinned host memory, read by the kernel over PCIe), one
// decode_attention per step over the visible tokens (docs/cuda.md).
#include <string>

#include "run/layer_common.hpp"
#include "run/layer_runs.hpp"

namespace retro::gpu_run {

using cuda::ClusterScoreShape;
using cuda::CopySegment;
using cuda::DecodeShape;

void run_full_layer(const GpuLayerJob& job, const StepFn& on_step) {
    const LayerShape s = check_job(job);
    const size_t d = (size_t)s.d, N = (size_t)s.tokens, per_bh = N * d;
    const size_t kv_bytes = 2 * (size_t)s.bh() * per_bh * sizeof(uint16_t);
    DecodeShape ds;
    ds.batch = s.B, ds.kv_heads = s.H, ds.group = s.g, ds.d = s.d, ds.capacity = s.tokens;
    ds.split = decode_split(s.tokens, s.bh());
    const size_t need = (job.offloaded ? 0 : kv_bytes) + cuda::decode_workspace_floats(ds) * sizeof(float) +
                        (size_t)s.B * s.hq() * (2 * d + 2) * sizeof(float);
    if (need > cuda::device_free_bytes())
        throw GpuMemoryError("full attention at batch " + std::to_string(s.B) + " needs " +
                             std::to_string(need >> 20) + " MiB of GPU memory; " +
                             std::to_string(cuda::device_free_bytes() >> 20) + " MiB free");

    // KV of every (replica, head): one fp16 copy per head converted once, replicated B times.
    cuda::DeviceBuffer<uint16_t> dk, dv;
    cuda::PinnedBuffer<uint16_t> pk, pv;  // offloaded: the KV itself; else the staging of one head
    try {
        if (job.offloaded) {
            pk = cuda::PinnedBuffer<uint16_t>((size_t)s.bh() * per_bh);
            pv = cuda::PinnedBuffer<uint16_t>(pk.size());
        } else {
            dk = cuda::DeviceBuffer<uint16_t>((size_t)s.bh() * per_bh);
            dv = cuda::DeviceBuffer<uint16_t>(dk.size());
            pk = cuda::PinnedBuffer<uint16_t>(per_bh);
            pv = cuda::PinnedBuffer<uint16_t>(per_bh);
        }
    } catch (const GpuMemoryError&) {
        throw;
    } catch (const Error& e) {
        throw GpuMemoryError("full attention at batch " + std::to_string(s.B) + ": " + e.what());
    }
    for (int h = 0; h < s.H; ++h) {
        const HeadSlice& hs = *job.heads[(size_t)h];
        if (job.offloaded) {
            to_half(hs.keys.data(), per_bh, pk.get() + (size_t)h * per_bh);
            to_half(hs.values.data(), per_bh, pv.get() + (size_t)h * per_bh);
            continue;
        }
        to_half(hs.keys.data(), per_bh, pk.get());
        to_half(hs.values.data(), per_bh, pv.get());
        for (int b = 0; b < s.B; ++b) {
            cuda::copy_h2d(dk.get() + ((size_t)b * s.H + h) * per_bh, pk.get(), per_bh * sizeof(uint16_t));
            cuda::copy_h2d(dv.get() + ((size_t)b * s.H + h) * per_bh, pv.get(), per_bh * sizeof(uint16_t));
        }
    }
    if (job.offloaded)
        for (int b = 1; b < s.B; ++b) {
            std::copy(pk.get(), pk.get() + (size_t)s.H * per_bh, pk.get() + (size_t)b * s.H * per_bh);
            std::copy(pv.get(), pv.get() + (size_t)s.H * per_bh, pv.get() + (size_t)b * s.H * per_bh);
        }
    const uint16_t* K = job.offloaded ? pk.get() : dk.get();
    const uint16_t* V = job.offloaded ? pv.get() : dv.get();

    cuda::Stream stream;
    void* st = stream.get();
    QueryStage q(job, s);
    LayerOutputs o(s);
    cuda::DeviceBuffer<float> work(cuda::decode_workspace_floats(ds));
    cuda::PinnedBuffer<int32_t> h_lens((size_t)s.bh());
    cuda::DeviceBuffer<int32_t> d_lens((size_t)s.bh());
    cuda::Event e0, e1;
    const auto attend = [&] {
        cuda::decode_attention(ds, q.device(), K, V, d_lens.get(), nullptr, nullptr, o.out.get(), o.lse.get(),
                               work.get(), st);
    };
    for (size_t i = 0; i < job.steps.size(); ++i) {
        const int t = job.steps[i], n = s.prompt + t + 1;
        std::fill(h_lens.get(), h_lens.get() + h_lens.size(), n);
        cuda::copy_h2d_async(d_lens.get(), h_lens.get(), h_lens.bytes(), st);
        q.stage(t, st);
        if (i == 0)
            for (int w = 0; w < job.warmup; ++w) attend();
        e0.record(st);
        attend();
        e1.record(st);
        o.read_back(st);
        stream.synchronize();
        GpuStep r;
        r.step = t, r.n = n;
        r.out = o.h_out.get(), r.lse = o.h_lse.get();
        r.times.attend_us = r.times.step_us = us_between(e0, e1);
        r.work.attend_bytes = (double)s.H * n * s.token_bytes();
        r.work.h2d_bytes = job.offloaded ? r.work.attend_bytes : 0.0;
        r.batch_h2d_bytes = r.work.h2d_bytes * s.B;
        r.head_h2d_bytes.assign((size_t)s.H, job.offloaded ? n * s.token_bytes() : 0.0);
        on_step(r);
    }
}

}  // namespace retro::gpu_run
