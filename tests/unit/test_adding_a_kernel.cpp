// docs/adding-a-kernel.md, followed for a kernel family defined only here: `scale` (y = a x over n
// floats). Its API (step 1); its kernel (step 2), here a host stand-in over the runtime API, since a test
// has no .cu; its CPU emulation's registration (step 3); its check and its benchmark registered with the
// same macros as the families of kernels/ (steps 4-5). The registry must list it beside every family,
// in its order, run its check (which fails on a planted bug) and its benchmark through run_benches, and
// every folder of kernels/ must register its checks (and, against the emulation, its CPU emulation).
// TheGuideShowsThisFilesCode keeps the guide's code and this file's the same.
// Compiled twice, as test_cuda_backend.cpp: into retro_kernel_emulation against the CPU emulation of
// every family (RETRO_GPU_EMULATION: runs everywhere), and into retro_unit_tests against the CUDA kernels
// (RETRO_HAVE_CUDA: what needs device memory is skipped without a usable device).
#include <gtest/gtest.h>

#if defined(RETRO_GPU_EMULATION) || defined(RETRO_HAVE_CUDA)
#include <algorithm>
#include <cstddef>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/bench_util.hpp"
#include "common/check_util.hpp"
#include "common/registry.hpp"
#include "cuda_api.hpp"

#ifdef RETRO_GPU_EMULATION
#define KERNEL_TEST(name) TEST(AddingAKernelEmulated, name)
#define REQUIRE_DEVICE()
#else
#define KERNEL_TEST(name) TEST(AddingAKernel, name)
#define REQUIRE_DEVICE() \
    if (!cuda::device_available()) GTEST_SKIP() << "no usable CUDA device: " << cuda::device_status()
#endif

namespace retro::cuda {

// Step 1: the API (kernels/scale/scale_api.hpp).
// [guide]
/// d_y[i] = a * d_x[i] for i < n. d_x, d_y: [n] f32 device memory (d_y may be d_x).
void scale_floats(const float* d_x, float a, float* d_y, size_t n, void* stream = nullptr);
// [/guide]

namespace {
int g_skip_last = 0;  // the planted bug: the last g_skip_last elements are not written
}  // namespace

// Step 2: the kernel. A test has no .cu: this stand-in does on the host what scale.cu does on the
// device, through the runtime API, so it runs on a GPU and on the emulation alike.
void scale_floats(const float* d_x, float a, float* d_y, size_t n, void*) {
    std::vector<float> h(n);
    if (n > 0) copy_d2h(h.data(), d_x, n * sizeof(float));
    for (float& v : h) v *= a;
    const size_t written = n - std::min(n, (size_t)g_skip_last);
    if (written > 0) copy_h2d(d_y, h.data(), written * sizeof(float));
}

// Step 3: the emulation covers the family (in the binary that links the CPU emulation).
#ifdef RETRO_GPU_EMULATION
// [guide]
RETRO_KERNEL_EMULATION(scale);
// [/guide]
#endif

namespace {

using namespace check_util;
using namespace bench_util;

// Step 4: the check (kernels/scale/scale_checks.cpp).
// [guide]
// Sizes 0, 1, not a multiple of the block and many blocks; fresh random inputs; the output poisoned
// first. a * x is one rounding on either side, so the comparison is exact.
void check_scale(Checker& c) {
    std::mt19937 rng(7);
    const float a = 0.75f;
    for (const size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{1} << 20}) {
        const std::vector<float> x = random_float(n, rng);
        std::vector<float> ref(n);
        for (size_t i = 0; i < n; ++i) ref[i] = a * x[i];  // the CPU reference
        DeviceBuffer<float> dx = upload(x), dy(n);
        poison(dy);
        scale_floats(dx.get(), a, dy.get(), n);
        synchronize();
        const std::vector<float> got = download(dy);
        c.expect_close(fmt("n=%g", (double)n), got.data(), ref.data(), n, 0.0);
    }
}
// [/guide]

// Step 5: the benchmark (kernels/scale/scale_bench.cpp).
// [guide]
std::vector<BenchRow> scale_bench(const BenchContext& ctx) {
    if (!ctx.want("scale")) return {};  // no rows, and no device work, for a group not asked for
    const size_t n = ctx.options.quick ? size_t{16} << 20 : size_t{64} << 20;
    DeviceBuffer<float> x(n), y(n);
    dev_memset(x.get(), 0, x.bytes());
    const double us = median_us([&] { scale_floats(x.get(), 0.5f, y.get(), n); }, ctx.reps);
    return {bw_row("scale_floats", shape("n=%ld", (long)n), us, 2.0 * n * sizeof(float), ctx.ceilings.d2d_bytes_per_s,
                   "D2D copy")};
}
// [/guide]

}  // namespace

// Steps 4-5: the registrations.
// [guide]
RETRO_KERNEL_CHECKS(scale, 50, {{"ScaleFloats", check_scale}});
// [/guide]
// [guide]
RETRO_KERNEL_BENCHES(scale, 50, {{"scale", scale_bench}});
// [/guide]

namespace {

const KernelFamily* find_family(const std::vector<KernelFamily>& fams, const std::string& name) {
    for (const KernelFamily& f : fams)
        if (f.name == name) return &f;
    return nullptr;
}

// The folders of kernels/ that are families (kernels/CMakeLists.txt's glob).
std::vector<std::string> kernel_folders() {
    std::vector<std::string> out;
    std::stringstream ss(RETRO_KERNEL_FAMILIES);
    for (std::string f; std::getline(ss, f, ',');) out.push_back(f);
    return out;
}

CheckCase scale_check() {
    for (const CheckCase& c : gpu_checks())
        if (c.name == "ScaleFloats") return c;
    ADD_FAILURE() << "ScaleFloats is not among gpu_checks()";
    return {"missing", [](Checker& c) { c.expect(false, "not registered"); }};
}

KERNEL_TEST(TheRegistryListsTheNewFamilyInItsOrder) {
    const std::vector<KernelFamily> fams = kernel_families();
    const KernelFamily* s = find_family(fams, "scale");
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->order, 50);
    ASSERT_EQ(s->checks.size(), 1u);
    EXPECT_EQ(s->checks[0].name, "ScaleFloats");
    ASSERT_EQ(s->benches.size(), 1u);
    EXPECT_EQ(s->benches[0].name, "scale");
#ifdef RETRO_GPU_EMULATION
    EXPECT_TRUE(s->emulated);
#endif
    // its check runs after those of every family of a lower order and before the others'
    std::vector<std::string> names, expected;
    for (const CheckCase& c : gpu_checks()) names.push_back(c.name);
    for (const KernelFamily& f : fams)
        for (const CheckCase& c : f.checks)
            if (f.order < 50 || (f.order == 50 && f.name < "scale")) expected.push_back(c.name);
    expected.push_back("ScaleFloats");
    ASSERT_GE(names.size(), expected.size());
    EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + (long)expected.size()), expected);
    EXPECT_NE(std::find(expected.begin(), expected.end(), "KMeansSegmented"), expected.end());  // kmeans is 40
    EXPECT_EQ(names.back(), "LaunchGate");  // common is 90
}

KERNEL_TEST(ItsCheckPassesWithANoteForEverySize) {
    REQUIRE_DEVICE();
    Checker ck;
    scale_check().body(ck);
    EXPECT_TRUE(ck.ok()) << ck.report();
    EXPECT_EQ(ck.notes().size(), 4u) << ck.report();
}

KERNEL_TEST(ItsCheckFailsWhenAnElementIsNotWritten) {
    REQUIRE_DEVICE();
    g_skip_last = 1;  // the poison is left in the last element of every non-empty size
    Checker ck;
    scale_check().body(ck);
    g_skip_last = 0;
    EXPECT_FALSE(ck.ok());
    EXPECT_EQ(ck.failures().size(), 3u) << ck.report();  // n = 1, 1000, 1M; n = 0 has no element
    EXPECT_NE(ck.report().find("nonfinite=1"), std::string::npos) << ck.report();
}

KERNEL_TEST(ItsBenchmarkRunsThroughRunBenchesAloneWhenItsGroupIsAsked) {
    REQUIRE_DEVICE();
    BenchOptions o;
    o.quick = true, o.only = "scale";  // --quick --bench-only scale: no other family's group contains it
    DeviceCeilings c;
    c.d2d_bytes_per_s = 1e12;
    const std::vector<BenchRow> rows = run_benches(o, c);
    ASSERT_EQ(rows.size(), 1u);
    const BenchRow& r = rows[0];
    EXPECT_EQ(r.name, "scale_floats");
    EXPECT_EQ(r.params, "n=16777216");
    EXPECT_EQ(r.bytes, 2.0 * (16 << 20) * sizeof(float));
    EXPECT_EQ(r.unit, "B/s");
    EXPECT_EQ(r.ceiling_name, "D2D copy");
    EXPECT_GT(r.time_us, 0);
    EXPECT_DOUBLE_EQ(r.fraction, r.rate / 1e12);
}

// Every folder of kernels/ is a registered family with its checks, and (where this binary links it) its
// CPU emulation; all but common (whose measure_ceilings is no benchmark row) register benchmarks.
KERNEL_TEST(EveryKernelFolderRegistersItsChecksAndEmulation) {
    const std::vector<KernelFamily> fams = kernel_families();
    const std::vector<std::string> folders = kernel_folders();
    ASSERT_GE(folders.size(), 5u);
    for (const std::string& name : folders) {
        const KernelFamily* f = find_family(fams, name);
        ASSERT_NE(f, nullptr) << "kernels/" << name << "/ registers nothing";
        EXPECT_FALSE(f->checks.empty()) << "kernels/" << name << "/ registers no check (RETRO_KERNEL_CHECKS)";
        if (name != "common") {
            EXPECT_FALSE(f->benches.empty()) << "kernels/" << name << "/ registers no benchmark (RETRO_KERNEL_BENCHES)";
        }
#ifdef RETRO_GPU_EMULATION
        EXPECT_TRUE(f->emulated) << "kernels/" << name << "/ has no CPU emulation (RETRO_KERNEL_EMULATION)";
#endif
    }
    // and every registered family but this test's is a folder
    for (const KernelFamily& f : fams) {
        if (f.name != "scale") {
            EXPECT_NE(std::find(folders.begin(), folders.end(), f.name), folders.end()) << f.name;
        }
    }
}

// Lines without their indentation, blank lines dropped.
std::vector<std::string> code_lines(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream ss(text);
    for (std::string l; std::getline(ss, l);) {
        const size_t a = l.find_first_not_of(" \t"), b = l.find_last_not_of(" \t\r");
        if (a != std::string::npos) out.push_back(l.substr(a, b - a + 1));
    }
    return out;
}

std::string read_file(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Every block of this file between "// [guide]" and "// [/guide]" stands, line for line, in one of the
// guide's ```cpp blocks.
KERNEL_TEST(TheGuideShowsThisFilesCode) {
    const std::string guide = read_file(RETRO_SOURCE_DIR "/docs/adding-a-kernel.md");
    const std::string self = read_file(RETRO_SOURCE_DIR "/tests/unit/test_adding_a_kernel.cpp");
    ASSERT_FALSE(guide.empty());
    ASSERT_FALSE(self.empty());
    std::vector<std::vector<std::string>> blocks;
    for (size_t at = guide.find("```cpp\n"); at != std::string::npos; at = guide.find("```cpp\n", at + 1)) {
        const size_t end = guide.find("```", at + 7);
        blocks.push_back(code_lines(guide.substr(at + 7, end - at - 7)));
    }
    ASSERT_GE(blocks.size(), 6u);
    int regions = 0;
    const std::string open = "// [guide]\n", close = "// [/guide]\n";
    for (size_t at = self.find(open); at != std::string::npos; at = self.find(open, at + 1)) {
        const size_t body = at + open.size(), end = self.find(close, body);
        ASSERT_NE(end, std::string::npos);
        const std::vector<std::string> region = code_lines(self.substr(body, end - body));
        bool found = false;
        for (const auto& b : blocks)
            found |= std::search(b.begin(), b.end(), region.begin(), region.end()) != b.end();
        EXPECT_TRUE(found) << "not in docs/adding-a-kernel.md:\n" << self.substr(body, end - body);
        ++regions;
    }
    EXPECT_EQ(regions, 6);
}

}  // namespace
}  // namespace retro::cuda

#else
TEST(AddingAKernel, FollowsTheGuide) {
    GTEST_SKIP() << "built without CUDA (no nvcc): retro_kernel_emulation runs this file against the CPU emulation";
}
#endif
