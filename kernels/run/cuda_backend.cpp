#include "run/cuda_backend.hpp"

#include "cuda_api.hpp"
#include "gpu/gpu_methods.hpp"
#include "run/layer_common.hpp"
#include "run/layer_runs.hpp"

namespace retro::gpu_run {

namespace {

class CudaBackend final : public GpuBackend {
  public:
    std::string status() const override { return cuda::device_status(); }
    std::string device_name() const override { return cuda::device_name(); }
    void check_shape(int head_dim, int group) const override { check_gpu_shape(head_dim, group); }
    std::string library_unsupported(int head_dim, int group) const override {
        return cuda::library_decode_unsupported(head_dim, group);
    }
    std::string cudnn_unsupported(int head_dim, int group) const override {
        return cuda::cudnn_decode_unsupported(head_dim, group);
    }
    BuiltIndex build_index(const GpuLayerJob& job) const override {
        const IndexBuild build = find_index_build(job.method);
        if (!build) throw ParamError("cuda backend: method '" + job.method + "' has no shared index to build");
        return build(job);
    }
    MeasuredDevice measure() const override {
        const cuda::DeviceCeilings c = cuda::measure_ceilings(true);
        MeasuredDevice m;
        m.device = cuda::device_name();
        m.hbm_bytes_per_s = c.d2d_bytes_per_s, m.h2d_bytes_per_s = c.h2d_pinned_bytes_per_s;
        m.d2h_bytes_per_s = c.d2h_pinned_bytes_per_s, m.transfer_latency_us = c.transfer_latency_us;
        m.memory_bytes = c.memory_bytes;
        return m;
    }
    void run_layer(const GpuLayerJob& job, const std::function<void(const GpuStep&)>& on_step) const override {
        const LayerRun run = find_layer_run(job.method);  // its twin is checked by check_job inside the run
        if (!run)
            throw ParamError("cuda backend: no GPU run for method '" + job.method + "' (GPU methods: " +
                             gpu_method_names() + ")");
        run(job, on_step);
    }
};

}  // namespace

std::unique_ptr<GpuBackend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }

}  // namespace retro::gpu_run
