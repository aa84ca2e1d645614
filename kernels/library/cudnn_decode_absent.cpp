// CudnnDecode in a build without the cuDNN frontend headers or cudnn.h (kernels/CMakeLists.txt): every
// use is refused by name, before any work, with the way to get them.
#include "core/error.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

std::string cudnn_decode_unsupported(int, int) {
    return "this build has no cuDNN frontend headers or no cudnn.h (run scripts/cudnn-frontend-headers.sh, "
           "then rebuild; or use \"full_kernel\": \"flashinfer\" or \"own\")";
}

struct CudnnDecode::Impl {};

CudnnDecode::CudnnDecode(const DecodeShape& s, const CudnnDecodeOptions&) : impl_(nullptr) {
    throw ParamError("cudnn decode: " + cudnn_decode_unsupported(s.d, s.group));
}
CudnnDecode::~CudnnDecode() = default;
void CudnnDecode::run(const float*, const uint16_t*, const uint16_t*, const int32_t*, float*, float*, void*) {}

}  // namespace retro::cuda
