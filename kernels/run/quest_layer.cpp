// Quest on the GPU (Tang et al., ICML 2024: the method `quest`, docs/methods/quest.md; docs/cuda.md
// "Quest on the GPU") for every KV head of a layer and B replicas of the request:
//   KV      every (replica, KV head)'s keys and values in device memory, fp16 [B*H, Np, d] (Np: the
//           tokens rounded up to whole pages), as Quest's code keeps them: its batch is capped by GPU
//           memory like full attention's
//   meta    each page's channel-wise min and max key, [B*H, 2, d, pages] fp16 (quest_page_meta), built
//           over the prompt's whole pages before the steps (the CPU method's build) and extended in each
//           step by the pages completed since the last one (its append)
//   a step  quest_select (the bound of every whole page per query head, the top budget - 1 pages, the
//           last page) -> the attention over the chosen pages where they lie (no gather): FlashInfer's
//           decode over the page table (LibraryDecode::plan_device with the pages), or where it does not take
//           the shape (or job.full_kernel is "own") decode_attention_pages.
//           Nothing on the host, nothing over PCIe. One stream, CUDA events.
// The selection equals the CPU method's page for page (kernels/quest/quest_checks.cpp; the backend
// test QuestMatchesTheCpuQuestMethod).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "methods/quest_pages.hpp"
#include "run/layer_common.hpp"
#include "run/layer_runs.hpp"

namespace retro::gpu_run {

namespace {

int pages_of(int n, int page) { return (n + page - 1) / page; }

}  // namespace

void run_quest_layer(const GpuLayerJob& job, const StepFn& on_step) {
    const LayerShape s = check_job(job);
    const QuestGpuParams& p = job.quest;
    const int P = p.page_size;
    const bool dense = job.heads[0]->layer < p.dense_layers;
    const auto budget_of = [&](int n) {  // pages attended at n visible tokens: Quest's budget, at most every page
        const int pages = pages_of(n, P);
        return dense ? pages : std::min(pages, quest_budget_pages(p.k, n, P));
    };
    int width = 1;  // the page table's widest list over the steps
    for (int t : job.steps) width = std::max(width, budget_of(s.prompt + t + 1));

    cuda::QuestShape qs;
    qs.seqs = s.bh(), qs.group = s.g, qs.d = s.d, qs.page = P, qs.per_head = p.per_head;
    qs.capacity = pages_of(s.tokens, P) * P;
    const int per = p.per_head ? s.g : 1;  // lists per (replica, KV head)
    cuda::DecodeShape ds;  // per_head: every query head its own sequence of pages
    ds.batch = s.B, ds.kv_heads = s.H * per, ds.group = s.g / per, ds.d = s.d, ds.capacity = width * P;
    ds.split = decode_split(ds.capacity, s.B * ds.kv_heads);
    const size_t d = (size_t)s.d, mp = (size_t)qs.max_pages();
    const size_t meta_elems = (size_t)qs.seqs * 2 * d * mp;
    const size_t need = 2 * (size_t)s.bh() * qs.capacity * d * sizeof(uint16_t) + meta_elems * sizeof(uint16_t) +
                        cuda::quest_select_scratch_bytes(qs) + (size_t)qs.lists() * (width + 1) * sizeof(int32_t) +
                        cuda::decode_workspace_floats(ds) * sizeof(float) +
                        (size_t)s.B * s.hq() * (2 * d + 2) * sizeof(float);
    require_device_memory("quest", s.B, need);
    const LayerKv kv = upload_layer_kv(job, s, (size_t)qs.capacity, false, "quest");

    cuda::Stream stream;
    void* st = stream.get();
    QueryStage q(job, s);
    LayerOutputs o(s);
    cuda::DeviceBuffer<uint16_t> meta(meta_elems);
    cuda::DeviceBuffer<uint8_t> scratch(cuda::quest_select_scratch_bytes(qs));
    const size_t lists0 = (size_t)s.H * per;  // replica 0's lists: its selection, read back for the harness
    SelectAttendStep timed((size_t)qs.lists(), width, lists0, ds);

    // the attention over the chosen pages: FlashInfer's decode reading them where they lie (the library full
    // attention and wave use; Quest's own kernels are FlashInfer's), planned on the device from the lengths
    // and the page table; the project's kernel where the library does not take the shape
    std::unique_ptr<cuda::LibraryDecode> lib;
    if (library_takes(job, s.d, ds.group, s.B * ds.kv_heads)) {
        lib = std::make_unique<cuda::LibraryDecode>(ds, P);
        timed.size_library(*lib, width, stream);
    }

    // the build: the prompt's whole pages (the first step's last page is the one holding token `prompt`)
    int meta_done = s.prompt / P;
    cuda::quest_page_meta(qs, kv.K, 0, meta_done, meta.get(), st);
    stream.synchronize();

    const double token_bytes = s.token_bytes(), meta_page_bytes = 2.0 * d * sizeof(uint16_t);
    std::vector<Selection> sels((size_t)s.H);
    std::vector<Footprint> fps((size_t)s.H);
    for (size_t i = 0; i < job.steps.size(); ++i) {
        const int t = job.steps[i], n = s.prompt + t + 1, pages = pages_of(n, P), last = pages - 1;
        const int budget = budget_of(n);
        q.stage(t, st);
        const auto select = [&] {
            cuda::quest_page_meta(qs, kv.K, meta_done, std::max(meta_done, last), meta.get(), st);
            cuda::quest_select(qs, q.device(), meta.get(), n, budget, timed.table(), timed.lens(), scratch.get(), st);
        };
        cuda::DecodeShape step_ds = ds;  // this step's lists hold at most `budget` pages (the workspace: width's)
        step_ds.capacity = budget * P;
        const auto attend = [&] {
            if (lib) {
                lib->plan_device(timed.lens(), st, 0, timed.table(), budget);
                lib->run(q.device(), kv.K, kv.V, o.out.get(), o.lse.get(), st);
            } else {
                cuda::decode_attention_pages(step_ds, q.device(), kv.K, kv.V, timed.table(), P, budget, timed.lens(),
                                             o.out.get(), o.lse.get(), timed.work(), st);
            }
        };
        GpuStep r = timed.run(job, t, n, i == 0, select, attend, lists0 * budget, o, stream);
        meta_done = std::max(meta_done, last);
        const bool scored = pages > budget && budget > 1;
        double attended = 0;
        for (int h = 0; h < s.H; ++h) {
            Selection& sel = sels[(size_t)h];
            sel.clear();
            sel.exact.resize((size_t)per);
            for (int j = 0; j < per; ++j) {  // list (replica 0, head h, member j): its tokens in table order
                const size_t list = (size_t)h * per + j;
                const int32_t base = (int32_t)(h * mp);  // sequence h of replica 0
                std::vector<int32_t>& ids = sel.exact[(size_t)j];
                ids.resize((size_t)timed.h_lens()[list]);
                for (int k = 0; k < timed.h_lens()[list]; ++k)
                    ids[(size_t)k] = (timed.h_table()[list * budget + k / P] - base) * P + k % P;
                attended += timed.h_lens()[list] * token_bytes;
            }
            sel.scan_ops = scored ? 2.0 * last * s.g : 0.0;  // as the CPU method counts a page bound
            fps[(size_t)h] = Footprint{pages * meta_page_bytes + n * token_bytes, 0.0};
        }
        r.selections = sels;
        r.footprints = fps;
        r.work.attend_bytes = attended;
        r.work.index_bytes = scored ? (double)s.H * per * last * meta_page_bytes : 0.0;
        r.head_h2d_bytes.assign((size_t)s.H, 0.0);
        on_step(r);
    }
}

}  // namespace retro::gpu_run
