// The GPU twins of the CPU methods (gpu_methods.hpp). One entry per method, in display order.
#include "gpu/gpu_methods.hpp"

#include "core/error.hpp"

namespace retro {

namespace {

// full: exact attention over every visible token with the library kernel (FlashInfer), cuDNN or the
// project's own flash-decoding kernel; KV in device memory, or pinned host memory read over PCIe every
// step (offloaded: its reads stream with attention).
GpuMethodInfo full_gpu_method() {
    GpuMethodInfo m;
    m.name = "full";
    m.summary = "exact decode attention (FlashInfer, cuDNN or the own kernel); KV in HBM or offloaded to pinned host memory";
    m.kernel_axis = true;
    m.step_graph = true;
    m.overlap = [](const GpuLayerJob& job) { return job.offloaded ? Overlap::stream : Overlap::serial; };
    m.check = [](const GpuLayerJob&) {};
    return m;
}

// wave (RetroInfer): cluster ranking and estimation on the GPU, the execution buffer assembled from the
// block cache and the clustered KV (pinned host memory, or device memory), attention with the merge.
GpuMethodInfo wave_gpu_method() {
    GpuMethodInfo m;
    m.name = "wave";
    m.summary = "RetroInfer's wave index: ranking, estimation, block cache and gather, attention with the merge";
    m.gpu_selects = true;
    m.shared_build = true;
    m.kv_axis = true;
    m.lookup_axis = true;
    m.step_graph = true;
    m.overlap = [](const GpuLayerJob&) { return Overlap::wave; };
    m.check = [](const GpuLayerJob& job) {
        if (job.step_graph && (!job.wave_device_gather || job.async_update))
            throw ParamError("wave with cuda.step_graph needs its device path without the asynchronous update "
                             "(device_gather true, async_update false: the host's lookups or the update's apply "
                             "inside the step cannot be captured)");
        if (job.wave.gqa != GroupRank::sum)
            throw ParamError("wave parameter 'gqa' = \"" + std::string(job.wave.gqa == GroupRank::max ? "max" : "mean") +
                             "\": the GPU ranks clusters by the sum over the group only (\"sum\")");
        if (job.kmeans_on_gpu && job.wave.seed != 0)
            throw ParamError("wave parameter 'seed' must be 0 with cuda.kmeans \"gpu\" (segmented_kmeans_gpu "
                             "starts from the stride midpoints only)");
    };
    return m;
}

// quest (Quest): page metadata, page bounds, top pages and the attention over the chosen pages on the
// GPU, the KV in device memory as in Quest's code (docs/methods/quest.md, "On the GPU").
GpuMethodInfo quest_gpu_method() {
    GpuMethodInfo m;
    m.name = "quest";
    m.summary = "Quest: page min/max metadata, page bounds, top pages and paged attention on the GPU; KV in HBM";
    m.gpu_selects = true;
    m.required_params = {{"placement", "gpu"}};
    m.overlap = [](const GpuLayerJob&) { return Overlap::serial; };
    m.check = [](const GpuLayerJob& job) {
        if (job.quest.page_size < 1 || !(job.quest.k > 0))
            throw ParamError("quest on the GPU: page_size >= 1 and a budget k > 0 are needed");
    };
    return m;
}

// pq (PQCache): lookup tables, asymmetric-distance scores, the group's ranking, the top-k and the attention
// over the chosen tokens on the GPU; the codebooks and codes built on the CPU by the method's own quantizer;
// the KV offloaded to pinned host memory (the paper's setting, cuda.wave_kv "host": the chosen tokens read
// through the GPU block cache of 128-token units, misses zero-copy over PCIe, the cache updated after the
// step or, with cuda.async_update, at the next step while the GPU selects) or in device memory ("gpu") (docs/methods/pq.md, "On the GPU"). softmax_sum is refused: its exp
// would not match the CPU's std::exp bit for bit.
GpuMethodInfo pq_gpu_method() {
    GpuMethodInfo m;
    m.name = "pq";
    m.summary = "PQCache: lookup tables, PQ scores, top-k and attention over the chosen tokens on the GPU; codes from "
                "the CPU method's quantizer; KV offloaded through the GPU block cache, or in HBM";
    m.gpu_selects = true;
    m.shared_build = true;  // the quantizers and the prompt's codes: once per layer, every batch and placement
    m.kv_axis = true;
    m.overlap = [](const GpuLayerJob&) { return Overlap::serial; };  // select -> the misses over PCIe -> attention
    m.check = [](const GpuLayerJob& job) {
        const PqHeadParams& p = job.pq.head;
        if (p.gqa == PqGqa::softmax_sum)
            throw ParamError("pq parameter 'gqa' = \"softmax_sum\": the GPU ranks by \"max\", \"mean\" or \"per_head\" "
                             "only (softmax_sum's exp would not match the CPU method's std::exp bit for bit)");
        if (p.nbits < 1 || p.nbits > 13 || p.m * (1 << p.nbits) > 12288)
            throw ParamError("pq on the GPU: m * 2^nbits <= 12288 is needed (a query head's lookup table in shared "
                             "memory); got m = " + std::to_string(p.m) + ", nbits = " + std::to_string(p.nbits));
    };
    return m;
}

// magicpig (MagicPIG): the queries' SimHash codes and the static tokens' attention on the GPU; the collision
// test, the sampling and the importance-weighted attention over the sampled tokens on the host's cores (the
// paper's split), the offloaded KV in host memory; the tables built on the CPU by the method's own code
// (docs/methods/magicpig.md, "On the GPU"). Every parameter value the CPU method takes is reproduced.
GpuMethodInfo magicpig_gpu_method() {
    GpuMethodInfo m;
    m.name = "magicpig";
    m.summary = "MagicPIG: query SimHash and static-token attention on the GPU; collisions, sampling and sampled "
                "attention on the host's cores (KV offloaded to host memory)";
    m.gpu_selects = true;
    m.overlap = [](const GpuLayerJob&) { return Overlap::serial; };
    m.check = [](const GpuLayerJob& job) {
        const SimHashParams& h = job.magicpig.head.hash;
        if (h.K < 0 || h.K > 30 || h.L < 1)
            throw ParamError("magicpig on the GPU: parameter 'K' in 0..30 and 'L' >= 1 are needed (got K = " +
                             std::to_string(h.K) + ", L = " + std::to_string(h.L) + ")");
    };
    return m;
}

// The CPU-index methods (FAISS's flat, IVF and HNSW indexes; RetrievalAttention's RoarGraph): the static
// pattern's KV (sink, window, decode tokens) in device memory, attended there; the queries read back to the
// host, where the CPU method's own index is searched and the retrieved tokens attended on the host's cores
// (RetrievalAttention's split, §3.3 and Figure 6 of its paper); the two partial results merged by their LSE
// (docs/cuda.md, "The CPU-index methods on the GPU"). FAISS's gpu_fetch placement (the retrieved KV copied
// to the GPU) is not built: the twin takes placement "cpu_attention".
GpuMethodInfo host_index_gpu_method(const std::string& name, const std::string& index,
                                    std::vector<std::pair<std::string, std::string>> required) {
    GpuMethodInfo m;
    m.name = name;
    m.summary = index + " searched and the retrieved tokens attended on the host's cores; the static pattern's KV "
                        "(sink, window, decode tokens) on the GPU, attended there; LSE merge";
    m.gpu_selects = true;
    m.shared_build = true;  // the instances over the prompt: once per layer, each run's replicas copies of them
    m.required_params = std::move(required);
    m.overlap = [](const GpuLayerJob&) { return Overlap::serial; };
    m.check = [](const GpuLayerJob& job) {
        if (!job.host_index.make) throw ParamError(job.method + " on the GPU: the job carries no CPU method to run");
        if (job.host_index.sink < 0 || job.host_index.window < 0)
            throw ParamError(job.method + " on the GPU: sink and window must be >= 0");
    };
    return m;
}

}  // namespace

const std::vector<GpuMethodInfo>& gpu_method_registry() {
    static const std::vector<GpuMethodInfo> r = {
        full_gpu_method(),
        wave_gpu_method(),
        quest_gpu_method(),
        pq_gpu_method(),
        magicpig_gpu_method(),
        host_index_gpu_method("faiss_flat", "FAISS IndexFlatIP", {{"placement", "cpu_attention"}}),
        host_index_gpu_method("faiss_ivf", "FAISS IndexIVFFlat", {{"placement", "cpu_attention"}}),
        host_index_gpu_method("faiss_hnsw", "FAISS IndexHNSWFlat", {{"placement", "cpu_attention"}}),
        host_index_gpu_method("retrieval_attention", "RetrievalAttention's RoarGraph", {})};
    return r;
}

const GpuMethodInfo* find_gpu_method(const std::string& name) {
    for (const GpuMethodInfo& m : gpu_method_registry())
        if (m.name == name) return &m;
    return nullptr;
}

void check_gpu_job(const GpuMethodInfo& m, const GpuLayerJob& job) {
    if (job.step_graph && !m.step_graph)
        throw ParamError(m.name + " on the GPU does not run its step as one CUDA graph (cuda.step_graph: full and wave)");
    m.check(job);
}

std::string gpu_method_names() {
    std::string s;
    for (const GpuMethodInfo& m : gpu_method_registry()) s += (s.empty() ? "" : ", ") + m.name;
    return s;
}

}  // namespace retro
