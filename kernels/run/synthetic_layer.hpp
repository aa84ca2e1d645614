#pragma once
// An in-memory synthetic layer for the RETRO_GPU_ONLY driver's wave-vs-full runs (kernels/run/
// wave_vs_full.hpp), built where the trace generator (lib/trace/synth: HDF5 and JSON) is not. It is a
// timing workload, NOT the calibrated retro-synth generator of docs/synth.md: keys in topics that recur
// in runs along the context (blobs around topic centres), N(0, 1) values, and per GQA group a query focus
// that stays on one topic from step to step with probability `stay`, so attention is clustered and the
// wave index and the GPU block cache see the locality of a real decode.
#include <vector>

#include "trace/trace.hpp"

namespace retro::gpu_run {

struct SyntheticLayerParams {
    int kv_heads = 8;     ///< Llama-3-8B: 32 query / 8 KV heads, head_dim 128
    int group = 4;
    int head_dim = 128;
    int prompt = 32768;
    int steps = 8;        ///< decode steps (tokens and queries)
    int topics = 256;     ///< topic centres per head
    int topic_run = 128;  ///< mean tokens of a run of one topic
    /// probability that the query focus keeps its topic at the next step: 0.95 calibrated to the GPU block
    /// cache's hit ratio on real decode queries (docs/performance.md "Cache locality from real queries";
    /// the GPU runs up to 2026-11-28 used 0.9)
    double stay = 0.95;
    float focus = 0.9f;   ///< query = focus x its topic centre + 0.5 N(0, I): ~98% of the attention on
                          ///< the topic's tokens at d = 128 (sparse, as decode attention is)
    unsigned seed = 1;
};

/// One HeadSlice per KV head (layer 0): keys, values [prompt + steps, d], queries [group, steps, d].
std::vector<HeadSlice> synthetic_layer(const SyntheticLayerParams& p);

}  // namespace retro::gpu_run
