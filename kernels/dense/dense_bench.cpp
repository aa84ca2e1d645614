// Microbenchmark of a decoder layer outside attention (registry.hpp), group dense_layer: DenseLayer::forward
// (cuBLAS's GEMMs, RMSNorm, SiLU) for Llama-3-8B's and Qwen2.5-7B's layers at each batch of the grid —
// the per-layer time besides attention that whole-model throughput adds (issue 40 #5). Its bytes are the
// layer's weights (read once per step: the bound at small batches), against the D2D ceiling; its FLOPs
// 2 x batch x the weights' count. A machine without cuBLAS gets no rows and a note on stderr is the
// driver's business: the rows are simply absent.
#include <vector>

#include "common/bench_util.hpp"
#include "common/registry.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

namespace {

using namespace bench_util;

std::vector<BenchRow> dense_bench(const BenchContext& ctx) {
    if (!ctx.want("dense_layer") || !dense_unsupported().empty()) return {};
    std::vector<BenchRow> rows;
    const int Bmax = ctx.batches.back();
    for (const DenseShape& s : {llama3_8b_dense(), qwen25_7b_dense()}) {
        DenseLayer layer(s, Bmax);
        DeviceBuffer<uint16_t> x((size_t)Bmax * s.hidden), attn((size_t)Bmax * s.attn());
        dev_memset(x.get(), 0x3C, x.bytes());  // ones: a bounded residual stream over the repetitions
        dev_memset(attn.get(), 0x00, attn.bytes());
        for (const int B : ctx.batches) {
            const double us = median_us([&] { layer.forward(B, x.get(), attn.get()); }, ctx.reps);
            BenchRow r = bw_row("dense_layer", s.name + shape(" B=%ld hidden=%ld ffn=%ld", B, s.hidden, s.ffn), us,
                                s.weight_bytes(), ctx.ceilings.d2d_bytes_per_s, "D2D copy");
            r.flops = (double)B * s.weight_bytes();  // 2 FLOPs per 2-byte weight and token
            r.extra = shape("\"batch\": %ld, \"weight_bytes\": %ld", B, (long)s.weight_bytes()) + ", \"model\": \"" + s.name + "\"";
            rows.push_back(r);
        }
    }
    return rows;
}

}  // namespace

RETRO_KERNEL_BENCHES(dense, 35, {{"dense_layer", dense_bench}});

}  // namespace retro::cuda
