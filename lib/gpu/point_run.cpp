// One GPU measurement point (point_run.hpp).
#include "gpu/point_run.hpp"

#include <numeric>

namespace retro {

GpuStepMeans run_gpu_point(const GpuBackend& gpu, const GpuLayerJob& job, const GpuMethodInfo& m,
                           const GpuPointOptions& o, const GpuPointStepFn& on_step) {
    const GpuStepContext ctx{&job, &m, o.hw, o.lookup_ns};
    GpuStepMeans means;
    int seen = 0;
    gpu.run_layer(job, [&](const GpuStep& st) {
        if (seen++ < o.warm_steps) {  // filling the cache: run, not timed
            on_step(st, nullptr);
            return;
        }
        const GpuStepSample sample = sample_gpu_step(st, ctx);
        means.add(sample);
        on_step(st, &sample);
    });
    means.finish();
    return means;
}

const Selection& gpu_step_selection(const GpuStep& st, const GpuMethodInfo& m, size_t h, Selection& all) {
    if (m.gpu_selects) return st.selections.at(h);
    auto& ids = all.shared();
    if (ids.size() != (size_t)st.n) {
        ids.resize((size_t)st.n);
        std::iota(ids.begin(), ids.end(), 0);
    }
    return all;
}

}  // namespace retro
