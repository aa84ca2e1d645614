// Full attention on the GPU: every KV head of the layer for B replicas, all of their KV as fp16 in GPU
// memory ([B*H, Np, d], Np = N rounded up to the library's page; offloaded: in pinned host memory, read
// by the kernel over PCIe), one attention per step over the visible tokens (docs/cuda.md) by the job's
// kernel: FlashInfer's batch decode (LibraryDecode, the baseline; planned before the timed region, as a
// serving engine plans once per step), cuDNN's fused attention (CudnnDecode: its plan built once, the
// lengths as its padding mask) or the own decode_attention.
#include <algorithm>
#include <memory>
#include <string>

#include "run/layer_common.hpp"
#include "run/layer_runs.hpp"

namespace retro::gpu_run {

using cuda::ClusterScoreShape;
using cuda::CopySegment;
using cuda::DecodeShape;

void run_full_layer(const GpuLayerJob& job, const StepFn& on_step) {
    const LayerShape s = check_job(job);
    const bool library = job.full_kernel == FullKernel::library, cudnn = job.full_kernel == FullKernel::cudnn;
    if (library) {  // refused by name before any allocation
        const std::string why = cuda::library_decode_unsupported(s.d, s.g);
        if (!why.empty()) throw ParamError("full attention (library kernel): " + why);
    }
    if (cudnn) {
        const std::string why = cuda::cudnn_decode_unsupported(s.d, s.g);
        if (!why.empty()) throw ParamError("full attention (cuDNN kernel): " + why);
    }
    constexpr int kPage = kLibraryPage;
    const size_t d = (size_t)s.d, N = (size_t)(s.tokens + kPage - 1) / kPage * kPage, per_bh = N * d;
    const size_t kv_bytes = 2 * (size_t)s.bh() * per_bh * sizeof(uint16_t);
    DecodeShape ds;
    ds.batch = s.B, ds.kv_heads = s.H, ds.group = s.g, ds.d = s.d, ds.capacity = (int)N;
    ds.split = decode_split((int)N, s.bh());
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
        // the padding rows past the last token are zeros: a kernel may load a whole page and mask it
        const size_t rows = (size_t)s.tokens * d;
        uint16_t* k0 = pk.get() + (job.offloaded ? (size_t)h * per_bh : 0);
        uint16_t* v0 = pv.get() + (job.offloaded ? (size_t)h * per_bh : 0);
        to_half(hs.keys.data(), rows, k0);
        to_half(hs.values.data(), rows, v0);
        std::fill(k0 + rows, k0 + per_bh, uint16_t{0});
        std::fill(v0 + rows, v0 + per_bh, uint16_t{0});
        if (job.offloaded) continue;
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
    cuda::DeviceBuffer<int32_t> d_lens((size_t)s.bh());  // [B*H]; cuDNN reads the first B (one per item)
    cuda::Event e0, e1;
    cuda::LaunchGate gate;
    std::unique_ptr<cuda::LibraryDecode> lib;
    std::unique_ptr<cuda::CudnnDecode> dnn;
    if (library) lib = std::make_unique<cuda::LibraryDecode>(ds, kPage);
    if (cudnn) dnn = std::make_unique<cuda::CudnnDecode>(ds);
    const auto attend = [&] {
        if (library) lib->run(q.device(), K, V, o.out.get(), o.lse.get(), st);
        else if (cudnn) dnn->run(q.device(), K, V, d_lens.get(), o.out.get(), o.lse.get(), st);
        else cuda::decode_attention(ds, q.device(), K, V, d_lens.get(), nullptr, nullptr, o.out.get(), o.lse.get(),
                                    work.get(), st);
    };
    for (size_t i = 0; i < job.steps.size(); ++i) {
        const int t = job.steps[i], n = s.prompt + t + 1;
        std::fill(h_lens.get(), h_lens.get() + h_lens.size(), n);
        cuda::copy_h2d_async(d_lens.get(), h_lens.get(), h_lens.bytes(), st);
        if (library) lib->plan(h_lens.get(), st);  // host planning, before the timed region
        q.stage(t, st);
        if (i == 0)
            for (int w = 0; w < job.warmup; ++w) attend();
        if (job.launch_gate) gate.hold(st);
        e0.record(st);
        attend();
        e1.record(st);
        gate.release();
        o.read_back(st);
        stream.synchronize();
        GpuStep r;
        r.step = t, r.n = n;
        r.out = o.h_out.get(), r.lse = o.h_lse.get();
        r.times.attend_us = r.times.step_us = us_between(e0, e1);
        r.times.gate_timed_out = gate.timed_out();
        r.work.attend_bytes = (double)s.H * n * s.token_bytes();
        r.work.h2d_bytes = job.offloaded ? r.work.attend_bytes : 0.0;
        r.batch_h2d_bytes = r.work.h2d_bytes * s.B;
        r.head_h2d_bytes.assign((size_t)s.H, job.offloaded ? n * s.token_bytes() : 0.0);
        on_step(r);
    }
}

}  // namespace retro::gpu_run
