#pragma once
// A tiny test harness for the GPU kernel checks (kernels/checks.cpp): the same check bodies run under
// GTest in the normal build (tests/unit/test_cuda.cpp) and under the stand-alone driver retro_gpu_check
// in the RETRO_GPU_ONLY build, which has no GTest (docs/cuda.md). Host-only, no dependencies, so it is
// unit-tested on machines without a GPU.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace retro {

/// The byte outputs are filled with before a kernel runs: 0xFF.. is a NaN in fp32 and in fp16, so an
/// element the kernel did not write fails every comparison.
constexpr int kPoisonByte = 0xFF;

struct ErrorStats {
    size_t n = 0;
    size_t nonfinite = 0;   ///< got[i] NaN/inf where ref[i] is finite (poison left behind, overflow)
    double max_abs = 0;     ///< max |got - ref| over finite pairs
    double rel_l2 = 0;      ///< ||got - ref|| / max(||ref||, 1e-30); inf when any nonfinite
};

/// Compares got: [n] with ref: [n]. A position where both are the same infinity counts as equal
/// (an empty partial's lse = -inf).
ErrorStats compare(const float* got, const float* ref, size_t n);

/// Collects the failures of one check; the check body calls it instead of EXPECT_*.
class Checker {
  public:
    /// Records `what` as a failure when !ok. Returns ok.
    bool expect(bool ok, const std::string& what);
    /// got ~ ref: no nonfinite values and rel_l2 <= rel_tol. Records the stats either way (as a note).
    bool expect_close(const std::string& what, const float* got, const float* ref, size_t n, double rel_tol);
    /// Free-form note kept with the result (sizes, errors measured).
    void note(const std::string& s) { notes_.push_back(s); }

    bool ok() const { return failures_.empty(); }
    const std::vector<std::string>& failures() const { return failures_; }
    const std::vector<std::string>& notes() const { return notes_; }
    std::string report() const;  ///< failures, then notes, one per line

  private:
    std::vector<std::string> failures_;
    std::vector<std::string> notes_;
};

struct CheckCase {
    std::string name;
    std::function<void(Checker&)> body;
};

/// JSON string literal of s (quotes included, control characters escaped).
std::string json_quote(const std::string& s);

}  // namespace retro
