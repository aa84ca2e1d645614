#include "run/cache_update.hpp"

namespace retro::gpu_run {

void CacheUpdateQueue::queue(const CacheUpdateLists& l, size_t n_adm, int64_t longest, size_t n_at, int d,
                             int32_t* table, cuda::Stream& main, bool side) {
    if (n_adm == 0 && n_at == 0) return;
    void* st = side ? side_.get() : main.get();
    if (n_adm > 0) {  // the data first, then the table that points at it (one stream: in this order)
        cuda::copy_h2d_async(l.d_adm.get(), l.h_adm.get(), n_adm * sizeof(cuda::CopySegment), st);
        cuda::copy_segments(l.d_adm.get(), (int)n_adm, d, longest, st);
    }
    if (n_at > 0) {
        cuda::copy_h2d_async(l.d_at.get(), l.h_at.get(), n_at * sizeof(int64_t), st);
        cuda::copy_h2d_async(l.d_val.get(), l.h_val.get(), n_at * sizeof(int32_t), st);
        cuda::set_entries(l.d_at.get(), l.d_val.get(), (int)n_at, table, st);
    }
    if (side) {  // the method's stream goes on once the update is in place
        done_.record(st);
        main.wait(done_);
    }
}

}  // namespace retro::gpu_run
