#pragma once
// The LSE merge of partial attention states (decode/decode.cu), shared by flash-decoding's splits and the
// estimation zone's chunks (wave/estimate.cu: its chunks are "splits" of one token each). Not public API.
#include <cuda_runtime.h>

#include "decode/decode_api.hpp"

namespace retro::cuda {

/// out, lse per query head (grid B*Hq, block d) from the partial states in `work`
/// ([B*Hq, s.splits(), d + 2]: m, l, acc[d]; a partial with l = 0 is empty) and the optional extra
/// (extra_out, extra_lse) state; throws naming `what` when the launch fails.
void launch_decode_combine(const DecodeShape& s, const float* work, const float* extra_out, const float* extra_lse,
                           float* out, float* lse, cudaStream_t stream, const char* what);

}  // namespace retro::cuda
