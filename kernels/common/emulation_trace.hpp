#pragma once
// The CPU emulation's record of the launches inside StepGraph::run (runtime_api.hpp): each emulated API
// call that enqueues work on a stream (kernels, asynchronous copies) names itself and its arguments here,
// so that a replay under the same key can be compared with its capture, launch by launch. Emulation only
// (runtime_emulation.cpp holds the record); the CUDA build does not include it.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/error.hpp"

namespace retro::cuda::emu {

/// Whether a StepGraph::run is recording.
bool recording();
/// Appends one launch to the record.
void record_launch(std::string line);
/// Throws StepGraphError when a StepGraph::run is recording and `stream` is not the one it captures.
void check_capture_stream(void* stream);

template <class T>
void describe_arg(std::string& out, const T& a) {
    char buf[64];
    if constexpr (std::is_pointer_v<T>) {
        std::snprintf(buf, sizeof buf, " %p", static_cast<const void*>(a));
        out += buf;
    } else if constexpr (std::is_floating_point_v<T>) {
        std::snprintf(buf, sizeof buf, " %a", (double)a);
        out += buf;
    } else if constexpr (std::is_integral_v<T> || std::is_enum_v<T>) {
        out += " " + std::to_string((long long)a);
    } else {  // a plain shape struct: its bytes (members alike give bytes alike: value-initialized, no padding read)
        static_assert(std::is_trivially_copyable_v<T>, "describe_arg: a trivially copyable argument");
        unsigned char b[sizeof(T)];
        std::memcpy(b, &a, sizeof(T));
        out += " {";
        for (unsigned char x : b) {
            std::snprintf(buf, sizeof buf, "%02x", x);
            out += buf;
        }
        out += "}";
    }
}

/// While alive: nothing recorded. An emulated call that does its work through other emulated calls
/// (LibraryDecode::run over decode_attention, with its own scratch) holds one: those are its own work, not
/// launches of the caller's.
class Quiet {
  public:
    Quiet();
    ~Quiet();
    Quiet(const Quiet&) = delete;
    Quiet& operator=(const Quiet&) = delete;

  private:
    void* saved_;
};

/// Records `name` and its arguments when a StepGraph::run is recording.
template <class... A>
void launch(const char* name, const A&... a) {
    if (!recording()) return;
    std::string line = name;
    (describe_arg(line, a), ...);
    record_launch(std::move(line));
}

/// Whether p lies inside memory from dev_alloc or pinned_alloc: what a kernel can read (runtime_emulation.cpp).
bool device_visible(const void* p);
/// Whether this call is an emulated call's own work (inside queued work or a Quiet): its arguments are the
/// emulation's, not the caller's.
bool nested();

template <class T>
void check_device_arg(const char* name, int i, const T& a) {
    if constexpr (std::is_pointer_v<T>) {
        using P = std::remove_cv_t<std::remove_pointer_t<T>>;
        if constexpr (std::is_arithmetic_v<P> || std::is_void_v<P>) {
            if (a && !device_visible(a))
                throw Error(std::string("cuda emulation: ") + name + "'s argument " + std::to_string(i) +
                            " points into host memory that is neither device nor pinned memory: a kernel on a GPU "
                            "cannot read it");
        }
    }
}

/// A kernel's launch: every pointer argument to numbers (or void) must be null or device-visible memory —
/// a kernel handed a std::vector's data() faults on a GPU and reads fine here otherwise —, then as launch().
template <class... A>
void kernel(const char* name, const A&... a) {
    if (!nested()) {
        int i = 0;
        (check_device_arg(name, ++i, a), ...);
    }
    launch(name, a...);
}

}  // namespace retro::cuda::emu
