#include "run/static_split.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace retro::gpu_run {

StaticKv upload_static_kv(const GpuLayerJob& job, const LayerShape& s, int ib, int ie) {
    StaticKv kv;
    kv.ib = ib, kv.ie = ie, kv.rows = ib + (s.tokens - ie);
    const size_t per = (size_t)kv.rows * s.d;
    kv.k = cuda::DeviceBuffer<uint16_t>((size_t)s.bh() * per);
    kv.v = cuda::DeviceBuffer<uint16_t>((size_t)s.bh() * per);
    std::vector<int32_t> ids((size_t)kv.rows);
    for (int r = 0; r < kv.rows; ++r) ids[(size_t)r] = r < ib ? r : ie + (r - ib);
    std::vector<uint16_t> hk(per), hv(per);
    for (int q = 0; q < s.D; ++q)
        for (int h = 0; h < s.H; ++h) {  // converted once per (sequence, head), copied to the replicas running it
            rows_to_half(head_of(job, q, h), ids.data(), ids.size(), hk.data(), hv.data());
            for (int b = q; b < s.B; b += s.D) {
                const size_t off = ((size_t)b * s.H + h) * per;
                cuda::copy_h2d(kv.k.get() + off, hk.data(), hk.size() * sizeof(uint16_t));
                cuda::copy_h2d(kv.v.get() + off, hv.data(), hv.size() * sizeof(uint16_t));
            }
        }
    return kv;
}

StaticAttention::StaticAttention(const GpuLayerJob& job, const cuda::DecodeShape& ds)
    : ds_(ds), work_(cuda::decode_workspace_floats(ds)) {
    if (library_takes(job, ds.d, ds.group, ds.batch * ds.kv_heads)) lib_ = std::make_unique<cuda::LibraryDecode>(ds, 1);
}

void StaticAttention::prepare(const int32_t* d_table, const int32_t* d_lens, int len, cuda::Stream& stream) {
    if (!lib_ || len < 1) return;
    lib_->plan_device(d_lens, stream.get(), 0, d_table, ds_.capacity);
    stream.synchronize();
}

void StaticAttention::run(const float* q, const StaticKv& kv, const int32_t* d_table, const int32_t* d_lens, int len,
                          float* out, float* lse, void* stream) {
    if (lib_ && len > 0) {  // the table's rows as one-token pages of the pool, planned on the device from the lengths
        lib_->plan_device(d_lens, stream, 0, d_table, ds_.capacity);
        lib_->run(q, kv.k.get(), kv.v.get(), out, lse, stream);
    } else {
        cuda::decode_attention_pages(ds_, q, kv.k.get(), kv.v.get(), d_table, 1, ds_.capacity, d_lens, out, lse,
                                     work_.get(), stream);
    }
}

void merge_partials(const float* out_g, float lse_g, const PartialAttention& p, int d, float* out, float* lse) {
    if (p.empty()) {
        std::copy(out_g, out_g + d, out);
        *lse = lse_g;
        return;
    }
    const double lh = p.lse(), m = std::max((double)lse_g, lh);
    const double wg = std::exp((double)lse_g - m), wh = std::exp(lh - m), z = wg + wh;
    for (int e = 0; e < d; ++e) out[e] = (float)((wg * out_g[e] + wh * (p.acc[(size_t)e] / p.l)) / z);
    *lse = (float)(m + std::log(z));
}

void merge_layer_partials(const LayerOutputs& o, const std::vector<PartialAttention>& parts, int d, float* out,
                          float* lse) {
    for (size_t m = 0; m < parts.size(); ++m)
        merge_partials(o.h_out.get() + m * d, o.h_lse.get()[m], parts[m], d, out + m * d, &lse[m]);
}

}  // namespace retro::gpu_run
