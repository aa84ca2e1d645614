#include "trace/trace.hpp"

#include "core/error.hpp"

namespace retro {

const char* dtype_name(DType t) {
    switch (t) {
        case DType::f16: return "float16";
        case DType::bf16: return "bfloat16";
        case DType::f32: return "float32";
    }
    return "?";
}

DType parse_dtype(const std::string& name) {
    if (name == "float16") return DType::f16;
    if (name == "bfloat16") return DType::bf16;
    if (name == "float32") return DType::f32;
    throw Error("unknown dtype '" + name + "' (expected float16, bfloat16 or float32)");
}

size_t dtype_bytes(DType t) { return t == DType::f32 ? 4 : 2; }

}  // namespace retro
