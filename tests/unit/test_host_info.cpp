// What a manifest says about the machine (core/host.hpp; issue 42 #6): the vector instruction sets
// present, the core count, and the libraries' versions, readable and plausible on any machine.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/host.hpp"

TEST(HostInfo, NamesTheInstructionSetsCoresAndLibraryVersions) {
    const nlohmann::json h = retro::host_info();
    ASSERT_TRUE(h.contains("cpu_flags") && h["cpu_flags"].is_array());
    const std::set<std::string> known = {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                                         "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
                                         "asimd", "sve"};
    std::set<std::string> seen;
    for (const auto& f : h["cpu_flags"]) {
        EXPECT_TRUE(known.count(f.get<std::string>())) << f;
        EXPECT_TRUE(seen.insert(f.get<std::string>()).second) << "listed twice: " << f;
    }
#if defined(__AVX2__)
    EXPECT_TRUE(seen.count("avx2")) << "built for AVX2 but the flags do not say so";
#endif
    EXPECT_GE(h["cpu_cores"].get<int>(), 1);
    ASSERT_TRUE(h.contains("versions") && h["versions"].is_object());
    for (const char* lib : {"faiss", "hdf5", "blas", "cuda"}) {
        ASSERT_TRUE(h["versions"].contains(lib)) << lib;
        EXPECT_FALSE(h["versions"][lib].get<std::string>().empty()) << lib;
    }
    EXPECT_EQ(h["versions"]["faiss"].get<std::string>().find('.'), 1u) << h["versions"]["faiss"];  // "1.7.3"
    EXPECT_NE(h["versions"]["hdf5"].get<std::string>(), "unknown");
}
