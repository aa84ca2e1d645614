// Full attention on the GPU: every KV head of the layer for B replicas, all of their KV as fp16 in GPU
// memory ([B*H, Np, d], Np = N rounded up to the library's page; offloaded: in pinned host memory, read
// by the kernel over PCIe), one attention per step over the visible tokens (docs/cuda.md) by the job's
// kernel: FlashInfer's batch decode (LibraryDecode, the baseline; planned before the timed region, as a
// serving engine plans once per step), cuDNN's fused attention (CudnnDecode: its plan built once, the
// lengths as its padding mask) or the own decode_attention. With job.step_graph the step is one CUDA graph
// (cuda::StepGraph), captured once: every launch reads the lengths from device memory (FlashInfer planned
// there, plan_device, inside the graph), so nothing it takes changes from step to step.
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
                        (size_t)s.B * s.hq() * (2 * d + 2) * sizeof(float) +
                        (library ? cuda::library_decode_bytes(ds, kPage) : 0);  // its page tables: ~34 MB at 128K, B*Hkv 512
    require_device_memory("full attention", s.B, need);

    const LayerKv kv = upload_layer_kv(job, s, N, job.offloaded, "full attention");
    const uint16_t* K = kv.K;
    const uint16_t* V = kv.V;

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
    cuda::StepGraph graph("full attention's step graph");
    const auto attend = [&] {
        if (library && job.step_graph) lib->plan_device(d_lens.get(), st);  // the lengths read on the device
        if (library) lib->run(q.device(), K, V, o.out.get(), o.lse.get(), st);
        else if (cudnn) dnn->run(q.device(), K, V, d_lens.get(), o.out.get(), o.lse.get(), st);
        else cuda::decode_attention(ds, q.device(), K, V, d_lens.get(), nullptr, nullptr, o.out.get(), o.lse.get(),
                                    work.get(), st);
    };
    for (size_t i = 0; i < job.steps.size(); ++i) {
        const int t = job.steps[i], n = s.prompt + t + 1;
        std::fill(h_lens.get(), h_lens.get() + h_lens.size(), n);
        cuda::copy_h2d_async(d_lens.get(), h_lens.get(), h_lens.bytes(), st);
        if (library && !job.step_graph) lib->plan(h_lens.get(), st);  // host planning, before the timed region
        q.stage(t, st);
        if (i == 0) {
            if (library && job.step_graph) {  // plan_device's buffers sized before any capture
                lib->plan_device(d_lens.get(), st);
                stream.synchronize();
            }
            for (int w = 0; w < job.warmup; ++w) attend();
        }
        if (job.launch_gate) gate.hold(st);
        e0.record(st);
        if (job.step_graph) graph.run(0, st, attend);  // one key: the graph never changes
        else attend();
        e1.record(st);
        gate.release();
        o.read_back(st);
        stream.synchronize();
        GpuStep r;
        r.step = t, r.n = n;
        r.out = o.h_out.get(), r.lse = o.h_lse.get();
        r.times.attend_us = r.times.step_us = us_between(e0, e1);
        r.times.gate_timed_out = gate.timed_out();
        r.times.graph_us = graph.last_capture_us();
        r.work.attend_bytes = (double)s.H * n * s.token_bytes();
        r.work.h2d_bytes = job.offloaded ? r.work.attend_bytes : 0.0;
        r.batch_h2d_bytes = r.work.h2d_bytes * s.B;
        r.head_h2d_bytes.assign((size_t)s.H, job.offloaded ? n * s.token_bytes() : 0.0);
        on_step(r);
    }
}

}  // namespace retro::gpu_run
