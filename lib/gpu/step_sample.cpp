// One measured GPU layer step (step_sample.hpp).
#include "gpu/step_sample.hpp"

#include <algorithm>

#include "gpu/prediction.hpp"
#include "gpu/replicas.hpp"

namespace retro {

GpuStepSample sample_gpu_step(const GpuStep& st, const GpuStepContext& c) {
    const GpuLayerJob& job = *c.job;
    const HeadSlice& h0 = *job.heads.at(0);
    GpuStepSample s;
    s.times = st.times;
    s.batch_h2d_bytes = st.batch_h2d_bytes;
    s.batch_d2h_bytes = st.batch_d2h_bytes;
    const int sequences = job.sequences();  // replicas of one sequence agree
    s.replica_diff = replica_diff(st.out, job.batch, job.heads.size() * (size_t)h0.group * (size_t)h0.head_dim, sequences);
    if (c.hw) {
        s.modeled = true;
        s.model = predict_gpu_step(st.work, c.method->overlap(job), h0.group, c.lookup_ns, job.batch, *c.hw);
    }
    return s;
}

void GpuStepMeans::add(const GpuStepSample& s) {
    ++steps;
    times.select_us += s.times.select_us, times.estimate_us += s.times.estimate_us;
    times.gather_us += s.times.gather_us, times.attend_us += s.times.attend_us;
    times.step_us += s.times.step_us, times.host_us += s.times.host_us;
    times.plan_us += s.times.plan_us, times.admit_us += s.times.admit_us, times.graph_us += s.times.graph_us;
    gate_timeouts += s.times.gate_timed_out ? 1 : 0;
    times.gate_timed_out = gate_timeouts > 0;
    batch_h2d_bytes += s.batch_h2d_bytes;
    replica_diff_max = std::max(replica_diff_max, s.replica_diff);
    model.select_us += s.model.select_us, model.h2d_us += s.model.h2d_us;
    model.attend_us += s.model.attend_us, model.attention_us += s.model.attention_us;
}

void GpuStepMeans::finish() {
    const double n = std::max(1, steps);
    for (double* x : {&times.select_us, &times.estimate_us, &times.gather_us, &times.attend_us, &times.step_us,
                      &times.host_us, &times.plan_us, &times.admit_us, &times.graph_us, &batch_h2d_bytes, &model.select_us,
                      &model.h2d_us, &model.attend_us, &model.attention_us})
        *x /= n;
}

}  // namespace retro
