// LibraryDecode in a build without FlashInfer's headers (kernels/CMakeLists.txt): every use is refused
// by name, before any work, with the way to get them.
#include "core/error.hpp"
#include "cuda_api.hpp"

namespace retro::cuda {

std::string library_decode_unsupported(int, int) {
    return "this build has no FlashInfer headers (run scripts/flashinfer-headers.sh, then rebuild; or use "
           "\"full_kernel\": \"own\")";
}

struct LibraryDecode::Impl {};

LibraryDecode::LibraryDecode(const DecodeShape& s, int) : impl_(nullptr) {
    throw ParamError("library decode: " + library_decode_unsupported(s.d, s.group));
}
LibraryDecode::~LibraryDecode() = default;
void LibraryDecode::plan(const int32_t*, void*) {}
void LibraryDecode::plan_device(const int32_t*, void*, int, const int32_t*, int) {}
void LibraryDecode::run(const float*, const uint16_t*, const uint16_t*, float*, float*, void*, const float*,
                        const float*) {}

}  // namespace retro::cuda
