#include "run/layer_common.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "gpu/gpu_methods.hpp"

namespace retro::gpu_run {

void check_gpu_shape(int d, int g) {
    if (!(d == 64 || d == 128 || d == 256) || g < 1 || g > 8)
        throw ParamError("cuda backend: head_dim " + std::to_string(d) + " and group " + std::to_string(g) +
                         " are outside the kernels' limits (head_dim 64, 128 or 256; 1-8 query heads per KV head)");
}

LayerShape check_job(const GpuLayerJob& job) {
    if (job.heads.empty() || !job.heads[0]) throw ParamError("cuda backend: a layer job without KV heads");
    if (job.batch < 1) throw ParamError("cuda backend: batch " + std::to_string(job.batch) + " (expected >= 1)");
    const HeadSlice& h0 = *job.heads[0];
    LayerShape s;
    s.H = (int)job.heads.size(), s.g = h0.group, s.d = h0.head_dim, s.B = job.batch;
    s.prompt = h0.prompt_len, s.tokens = h0.n_tokens();
    for (const std::vector<const HeadSlice*>* hs : {&job.heads, &job.more_heads})
        for (const HeadSlice* h : *hs)
            if (!h || h->group != s.g || h->head_dim != s.d || h->prompt_len != s.prompt || h->num_steps != h0.num_steps)
                throw ParamError("cuda backend: the KV heads of a layer job differ in shape");
    if (job.more_heads.size() % job.heads.size() != 0)
        throw ParamError("cuda backend: " + std::to_string(job.more_heads.size()) + " more heads is not a whole number of " +
                         "sequences of " + std::to_string(s.H) + " KV heads");
    s.D = std::min(s.B, job.sequences());
    check_gpu_shape(s.d, s.g);
    if (job.steps.empty()) throw ParamError("cuda backend: a layer job without steps");
    for (size_t i = 0; i < job.steps.size(); ++i)
        if (job.steps[i] < 0 || job.steps[i] >= h0.num_steps || (i > 0 && job.steps[i] <= job.steps[i - 1]))
            throw ParamError("cuda backend: steps must be ascending decode steps of the slices (0.." +
                             std::to_string(h0.num_steps - 1) + ")");
    s.last = job.steps.back();
    const GpuMethodInfo* m = find_gpu_method(job.method);
    if (!m) throw ParamError("cuda backend: '" + job.method + "' has no GPU twin (GPU methods: " + gpu_method_names() + ")");
    check_gpu_job(*m, job);
    return s;
}

const HeadSlice& head_of(const GpuLayerJob& job, int seq, int h) {
    return seq == 0 ? *job.heads[(size_t)h] : *job.more_heads[(size_t)(seq - 1) * job.heads.size() + (size_t)h];
}

void to_half(const float* x, size_t n, uint16_t* out) {
    for (size_t i = 0; i < n; ++i) out[i] = float_to_half(x[i]);
}

void rows_to_half(const HeadSlice& h, const int32_t* ids, size_t count, uint16_t* k_out, uint16_t* v_out) {
    const size_t d = (size_t)h.head_dim;
    for (size_t i = 0; i < count; ++i) {
        to_half(h.key(ids[i]), d, k_out + i * d);
        to_half(h.value(ids[i]), d, v_out + i * d);
    }
}

LayerKv upload_layer_kv(const GpuLayerJob& job, const LayerShape& s, size_t rows, bool pinned, const std::string& what) {
    const size_t d = (size_t)s.d, per_bh = rows * d;
    LayerKv kv;
    try {
        if (pinned) {
            kv.pk = cuda::PinnedBuffer<uint16_t>((size_t)s.bh() * per_bh);
            kv.pv = cuda::PinnedBuffer<uint16_t>(kv.pk.size());
        } else {
            kv.dk = cuda::DeviceBuffer<uint16_t>((size_t)s.bh() * per_bh);
            kv.dv = cuda::DeviceBuffer<uint16_t>(kv.dk.size());
            kv.pk = cuda::PinnedBuffer<uint16_t>(per_bh);
            kv.pv = cuda::PinnedBuffer<uint16_t>(per_bh);
        }
    } catch (const GpuMemoryError&) {
        throw;
    } catch (const Error& e) {
        throw GpuMemoryError(what + " at batch " + std::to_string(s.B) + ": " + e.what());
    }
    // each (sequence, KV head) converted once, into replica seq's rows (pinned) or the staging rows, then copied
    // to every replica of that sequence
    for (int q = 0; q < s.D; ++q)
        for (int h = 0; h < s.H; ++h) {
            const HeadSlice& hs = head_of(job, q, h);
            const size_t used = (size_t)s.tokens * d;
            uint16_t* k0 = kv.pk.get() + (pinned ? ((size_t)q * s.H + h) * per_bh : 0);
            uint16_t* v0 = kv.pv.get() + (pinned ? ((size_t)q * s.H + h) * per_bh : 0);
            to_half(hs.keys.data(), used, k0);
            to_half(hs.values.data(), used, v0);
            std::fill(k0 + used, k0 + per_bh, uint16_t{0});
            std::fill(v0 + used, v0 + per_bh, uint16_t{0});
            for (int b = pinned ? q + s.D : q; b < s.B; b += s.D) {
                const size_t at = ((size_t)b * s.H + h) * per_bh;
                if (pinned) {
                    std::copy(k0, k0 + per_bh, kv.pk.get() + at);
                    std::copy(v0, v0 + per_bh, kv.pv.get() + at);
                } else {
                    cuda::copy_h2d(kv.dk.get() + at, k0, per_bh * sizeof(uint16_t));
                    cuda::copy_h2d(kv.dv.get() + at, v0, per_bh * sizeof(uint16_t));
                }
            }
        }
    kv.K = pinned ? kv.pk.get() : kv.dk.get();
    kv.V = pinned ? kv.pv.get() : kv.dv.get();
    return kv;
}

QueryStage::QueryStage(const GpuLayerJob& job, const LayerShape& s)
    : job_(job), s_(s), h_((size_t)s.B * s.hq() * s.d), d_(h_.size()) {}

void QueryStage::stage(int t, void* stream) {
    const size_t d = (size_t)s_.d;
    for (int b = 0; b < s_.B; ++b)
        for (int h = 0; h < s_.H; ++h)
            for (int j = 0; j < s_.g; ++j) {
                const float* q = head_of(job_, s_.seq(b), h).query(j, t);
                std::copy(q, q + d, h_.get() + (((size_t)b * s_.H + h) * s_.g + j) * d);
            }
    cuda::copy_h2d_async(d_.get(), h_.get(), h_.bytes(), stream);
}

LayerOutputs::LayerOutputs(const LayerShape& s)
    : out((size_t)s.B * s.hq() * s.d), lse((size_t)s.B * s.hq()), h_out(out.size()), h_lse(lse.size()) {}

void LayerOutputs::read_back(void* stream) {
    cuda::copy_d2h_async(h_out.get(), out.get(), out.bytes(), stream);
    cuda::copy_d2h_async(h_lse.get(), lse.get(), lse.bytes(), stream);
}

SelectAttendStep::SelectAttendStep(size_t lists, int width, size_t lists0, const cuda::DecodeShape& ds)
    : lists_(lists), width_(width), table_(lists * (size_t)width), lens_(lists), h_table_(lists0 * (size_t)width),
      h_lens_(lists0), work_(cuda::decode_workspace_floats(ds)) {}

void SelectAttendStep::size_library(cuda::LibraryDecode& lib, int page_stride, cuda::Stream& stream) {
    const std::vector<int32_t> one(lists_, 1), zero(lists_ * (size_t)width_, 0);
    cuda::copy_h2d(lens_.get(), one.data(), one.size() * sizeof(int32_t));
    cuda::copy_h2d(table_.get(), zero.data(), zero.size() * sizeof(int32_t));
    lib.plan_device(lens_.get(), stream.get(), 0, page_stride > 0 ? table_.get() : nullptr, page_stride);
    stream.synchronize();
}

GpuStep SelectAttendStep::run(const GpuLayerJob& job, int t, int n, bool first, const std::function<void()>& select,
                              const std::function<void()>& attend, size_t table_ints, LayerOutputs& o,
                              cuda::Stream& stream, const StepHooks& hooks) {
    void* st = stream.get();
    if (first)
        for (int w = 0; w < job.warmup; ++w) {
            select();
            if (hooks.gather) hooks.gather();
            attend();
        }
    if (job.launch_gate) gate_.hold(st);
    e0_.record(st);
    select();
    e1_.record(st);
    double host_us = 0;
    if (hooks.before_gather) {  // host work while the GPU selects: the gate opens first, so it runs meanwhile
        gate_.release();
        host_us += hooks.before_gather();
    }
    if (hooks.gather) hooks.gather();
    eg_.record(st);
    attend();
    e2_.record(st);
    gate_.release();
    if (hooks.after_attend) host_us += hooks.after_attend();  // on the stream: the next step waits for it
    e3_.record(st);
    cuda::copy_d2h_async(h_table_.get(), table_.get(), table_ints * sizeof(int32_t), st);
    cuda::copy_d2h_async(h_lens_.get(), lens_.get(), h_lens_.bytes(), st);
    o.read_back(st);
    stream.synchronize();
    GpuStep r;
    r.step = t, r.n = n;
    r.out = o.h_out.get(), r.lse = o.h_lse.get();
    r.times.select_us = us_between(e0_, e1_);
    r.times.gather_us = us_between(e1_, eg_);
    r.times.attend_us = us_between(eg_, e2_);
    r.times.step_us = us_between(e0_, e2_);
    r.times.admit_us = us_between(e2_, e3_);
    r.times.host_us = host_us;
    r.times.gate_timed_out = gate_.timed_out();
    return r;
}

MethodContext head_context(const HeadSlice& h, const std::function<unsigned(int, int)>& seed) {
    MethodContext ctx;
    ctx.layer = h.layer, ctx.kv_head = h.kv_head, ctx.head_dim = h.head_dim, ctx.group = h.group;
    ctx.prompt_len = h.prompt_len, ctx.scale = 1.0f / std::sqrt((float)h.head_dim), ctx.storage = DType::f16;
    ctx.slice = &h, ctx.seed = seed ? seed(h.layer, h.kv_head) : 0u;
    return ctx;
}

void require_device_memory(const std::string& what, int batch, size_t need) {
    if (need > cuda::device_free_bytes())
        throw GpuMemoryError(what + " at batch " + std::to_string(batch) + " needs " + std::to_string(need >> 20) +
                             " MiB of GPU memory; " + std::to_string(cuda::device_free_bytes() >> 20) + " MiB free");
}

bool library_takes(const GpuLayerJob& job, int d, int group, int requests) {
    return job.full_kernel == FullKernel::library && cuda::library_decode_unsupported(d, group).empty() &&
           requests <= cuda::kLibraryDeviceRequests;
}

int decode_split(int capacity, int bh) {
    const long target = (long)capacity * std::max(1, bh) / 528;
    return (int)std::max(64L, std::min(512L, target / 64 * 64));
}

}  // namespace retro::gpu_run
