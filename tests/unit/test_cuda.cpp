// CUDA kernel checks under GTest (docs/cuda.md). The check bodies live in kernels/<family>/*_checks.cpp and are
// shared with the stand-alone driver retro_gpu_check; here each becomes one test that reports SKIPPED
// when the build has no CUDA or the machine no GPU. The harness itself (comparison, poison, JSON) is
// host code and is tested everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/check.hpp"
#include "core/half.hpp"
#ifdef RETRO_HAVE_CUDA
#include "common/registry.hpp"
#include "cuda_api.hpp"
#endif

namespace retro {
namespace {

TEST(GpuHarness, CompareMeasuresRelativeError) {
    const float ref[4] = {1, 2, 3, 4}, got[4] = {1, 2, 3, 4.04f};
    const ErrorStats s = compare(got, ref, 4);
    EXPECT_EQ(s.nonfinite, 0u);
    EXPECT_NEAR(s.rel_l2, 0.04 / std::sqrt(30.0), 1e-6);
    EXPECT_NEAR(s.max_abs, 0.04, 1e-6);
}

TEST(GpuHarness, PoisonIsNaNInBothWidthsAndFailsComparison) {
    float f;
    uint32_t bits;
    std::memset(&bits, kPoisonByte, 4);
    std::memcpy(&f, &bits, 4);
    EXPECT_TRUE(std::isnan(f));
    uint16_t h;
    std::memset(&h, kPoisonByte, 2);
    EXPECT_TRUE(std::isnan(half_to_float(h)));
    const float ref[3] = {1, 2, 3}, got[3] = {1, f, 3};
    Checker c;
    EXPECT_FALSE(c.expect_close("poisoned", got, ref, 3, 1.0));
    EXPECT_FALSE(c.ok());
    EXPECT_EQ(c.failures().size(), 1u);
    EXPECT_NE(c.report().find("nonfinite=1"), std::string::npos);
}

TEST(GpuHarness, MatchingInfinitiesAreEqual) {
    const float inf = std::numeric_limits<float>::infinity();
    const float ref[2] = {-inf, 1}, same[2] = {-inf, 1}, other[2] = {inf, 1};
    EXPECT_EQ(compare(same, ref, 2).nonfinite, 0u);
    EXPECT_EQ(compare(other, ref, 2).nonfinite, 1u);
    Checker c;
    EXPECT_TRUE(c.expect_close("lse", same, ref, 2, 1e-6));
    EXPECT_TRUE(c.ok());
}

TEST(GpuHarness, JsonQuoteEscapes) {
    EXPECT_EQ(json_quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
}

#ifdef RETRO_HAVE_CUDA
class GpuKernel : public testing::TestWithParam<std::string> {};

TEST_P(GpuKernel, MatchesCpuReference) {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
    for (const CheckCase& c : cuda::gpu_checks()) {
        if (c.name != GetParam()) continue;
        Checker ck;
        c.body(ck);
        EXPECT_TRUE(ck.ok()) << ck.report();
        return;
    }
    FAIL() << "no check named " << GetParam();
}

// The checks the families of kernels/ register (a test's own family, such as test_adding_a_kernel.cpp's,
// is not one of them).
const std::vector<std::string> kKernelChecks = {
    "ClusterRank",   "ClusterSelect", "ClusterSelectSplit", "EstimateAttention", "CopySegments",  "GatherClusters", "SetEntries",
    "DecodeAttention", "DecodeAttentionPages", "QuestPageMeta", "QuestSelect", "PqScores", "PqSelect", "PqGatherRows", "MagicpigHash",
    "LibraryDecode", "CudnnDecode",   "DenseLayer",    "KMeansAssign",  "KMeansSegmented",   "LaunchGate"};

INSTANTIATE_TEST_SUITE_P(Cuda, GpuKernel, testing::ValuesIn(kKernelChecks),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(GpuKernelList, EveryCheckIsInstantiated) {
    // host-only: the parameter list above must name every check of the folders of kernels/, in their
    // order (a new check is not silently dropped)
    const std::string folders = "," RETRO_KERNEL_FAMILIES ",";
    std::vector<std::string> registered;
    for (const cuda::KernelFamily& f : cuda::kernel_families())
        if (folders.find("," + f.name + ",") != std::string::npos)
            for (const CheckCase& c : f.checks) registered.push_back(c.name);
    EXPECT_EQ(registered, kKernelChecks);
}

// A variable of the environment unset for a test and put back as it was after it.
struct SavedEnv {
    explicit SavedEnv(const char* name) : name(name) {
        const char* v = std::getenv(name);
        had = v != nullptr;
        if (had) value = v;
        unsetenv(name);
    }
    ~SavedEnv() {
        if (had) setenv(name, value.c_str(), 1);
        else unsetenv(name);
    }
    const char* name;
    bool had = false;
    std::string value;
};

TEST(EstimateWidth, AutomaticTakesTheWideBlocksUpToTwoPerSmAndTheEnvironmentChooses) {
    // host-only: the rule the H200's side-by-side rows chose (132 SMs: batch 1's 64 and 240 blocks wide,
    // batch 8's 512 and 1,920 four-warp)
    using cuda::EstimateWidth;
    EXPECT_TRUE(cuda::estimate_wide_for(EstimateWidth::automatic, 64, 132));
    EXPECT_TRUE(cuda::estimate_wide_for(EstimateWidth::automatic, 264, 132));
    EXPECT_FALSE(cuda::estimate_wide_for(EstimateWidth::automatic, 265, 132));
    EXPECT_FALSE(cuda::estimate_wide_for(EstimateWidth::automatic, 512, 132));
    EXPECT_FALSE(cuda::estimate_wide_for(EstimateWidth::four, 8, 132));
    EXPECT_TRUE(cuda::estimate_wide_for(EstimateWidth::wide, 100000, 132));
    const SavedEnv saved("RETRO_EST_WARPS");
    EXPECT_EQ(cuda::estimate_width_from_env(), EstimateWidth::automatic);
    setenv("RETRO_EST_WARPS", "4", 1);
    EXPECT_EQ(cuda::estimate_width_from_env(), EstimateWidth::four);
    setenv("RETRO_EST_WARPS", "wide", 1);
    EXPECT_EQ(cuda::estimate_width_from_env(), EstimateWidth::wide);
    setenv("RETRO_EST_WARPS", "8", 1);
    EXPECT_THROW(cuda::estimate_width_from_env(), ParamError);
}

TEST(LibraryDecode, ItsMemoryEstimateCountsThePageTables) {
    // host-only: 128K tokens in 16-token pages for 8 (b, kv head) requests of 4 query heads, d 128: two tables
    // of 2*8 + 1 + 8*8192 int32 and the fp16 output with its LSEs; the tables grow with batch and context
    cuda::DecodeShape s;
    s.batch = 1, s.kv_heads = 8, s.group = 4, s.d = 128, s.capacity = 131072;
    EXPECT_EQ(cuda::library_decode_bytes(s, 16), 2 * (2 * 8 + 1 + 8 * 8192) * 4 + 8 * 4 * (128 * 2 + 4));
    s.batch = 64;  // the fourth lease's largest 128K full-attention batch: ~34 MB
    EXPECT_GT(cuda::library_decode_bytes(s, 16), 32u << 20);
    EXPECT_LT(cuda::library_decode_bytes(s, 16), 33u << 20);
}

TEST(SelectSplit, AutomaticSplitsWhereTheClustersFitAtOnceOnSm90AndTheEnvironmentChooses) {
    // host-only: one 8-block cluster per (b, kv head); auto splits where every pair's cluster runs at once:
    // with 16 active clusters batch 1's 8 KV heads and up to 16 pairs split, batch 8's 64 pairs do not; with
    // 14 (GPCs that hold fewer clusters than SMs / 8 suggests) 16 pairs no longer do; never below sm_90 (no
    // thread-block clusters); off by default
    using cuda::SelectSplit;
    EXPECT_TRUE(cuda::select_split_for(SelectSplit::automatic, 8, 90, 16));
    EXPECT_TRUE(cuda::select_split_for(SelectSplit::automatic, 16, 90, 16));
    EXPECT_FALSE(cuda::select_split_for(SelectSplit::automatic, 16, 90, 14));
    EXPECT_FALSE(cuda::select_split_for(SelectSplit::automatic, 17, 90, 16));
    EXPECT_FALSE(cuda::select_split_for(SelectSplit::automatic, 64, 90, 16));
    EXPECT_TRUE(cuda::select_split_for(SelectSplit::on, 64, 90, 16));
    EXPECT_FALSE(cuda::select_split_for(SelectSplit::on, 1, 80, 13));
    EXPECT_FALSE(cuda::select_split_for(SelectSplit::off, 1, 90, 16));
    EXPECT_FALSE(cuda::select_split_for(SelectSplit::automatic, 1, 0, 0));  // no device (the emulation)
    const SavedEnv saved("RETRO_SELECT_SPLIT");
    EXPECT_EQ(cuda::select_split_from_env(), SelectSplit::off);
    setenv("RETRO_SELECT_SPLIT", "on", 1);
    EXPECT_EQ(cuda::select_split_from_env(), SelectSplit::on);
    setenv("RETRO_SELECT_SPLIT", "auto", 1);
    EXPECT_EQ(cuda::select_split_from_env(), SelectSplit::automatic);
    setenv("RETRO_SELECT_SPLIT", "yes", 1);
    EXPECT_THROW(cuda::select_split_from_env(), ParamError);
}
#else
TEST(GpuKernel, MatchesCpuReference) { GTEST_SKIP() << "built without CUDA (no nvcc)"; }
#endif

}  // namespace
}  // namespace retro
