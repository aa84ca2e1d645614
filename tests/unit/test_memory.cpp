// The memory check before work (lib/core/memory.hpp): sizes as given on the command line, the refusal
// message (estimate, limit, advice), and the estimates of a head read and of a synthetic trace.
#include <gtest/gtest.h>

#include "core/memory.hpp"
#include "trace/reader.hpp"
#include "trace/memory_estimates.hpp"

using namespace retro;

TEST(Memory, ParsesByteSizes) {
    EXPECT_DOUBLE_EQ(parse_byte_size("4096", "--max-memory"), 4096.0);
    EXPECT_DOUBLE_EQ(parse_byte_size("8G", "--max-memory"), 8.0 * (1 << 30));
    EXPECT_DOUBLE_EQ(parse_byte_size("8GiB", "--max-memory"), 8.0 * (1 << 30));
    EXPECT_DOUBLE_EQ(parse_byte_size("8gb", "--max-memory"), 8.0 * (1 << 30));
    EXPECT_DOUBLE_EQ(parse_byte_size("1.5M", "--max-memory"), 1.5 * (1 << 20));
    EXPECT_DOUBLE_EQ(parse_byte_size("100K", "--max-memory"), 100.0 * 1024);
    EXPECT_DOUBLE_EQ(parse_byte_size("2T", "--max-memory"), 2.0 * 1024 * 1024 * 1024 * 1024);
    for (const char* bad : {"", "G", "8X", "-1G", "0", "nan", "1e400", "8 X B"}) {
        try {
            parse_byte_size(bad, "--max-memory");
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const ConfigError& e) {
            EXPECT_NE(std::string(e.what()).find("--max-memory '" + std::string(bad) + "'"), std::string::npos)
                << e.what();
        }
    }
}

TEST(Memory, FormatsBytes) {
    EXPECT_EQ(format_bytes(512), "512 B");
    EXPECT_EQ(format_bytes(1536), "1.5 KiB");
    EXPECT_EQ(format_bytes(3.0 * (1 << 30)), "3.0 GiB");
}

TEST(Memory, RefusesAboveTheLimitNamingEstimateLimitAndAdvice) {
    const MemoryEstimate need{2.0 * (1 << 30), "doing x", "do less"};
    EXPECT_NO_THROW(check_memory(need, {3.0 * (1 << 30), "test"}));
    EXPECT_NO_THROW(check_memory(need, {0, "unknown"}));  // unknown limit: no check
    try {
        check_memory(need, {1.0 * (1 << 30), "--max-memory 1G"});
        ADD_FAILURE() << "not refused";
    } catch (const ResourceError& e) {
        EXPECT_STREQ(e.what(),
                     "doing x needs about 2.0 GiB of memory, more than the 1.0 GiB limit (--max-memory 1G); do less");
    }
    EXPECT_GT(available_memory_bytes(), 0.0);  // /proc/meminfo is readable on Linux
}

TEST(Memory, HeadSliceBytesCountsEveryArrayWithoutOverflow) {
    TraceInfo in;
    in.num_q_heads = 8;
    in.num_kv_heads = 2;
    in.head_dim = 16;
    in.prompt_len = 40;
    in.num_decode_steps = 7;
    in.num_prefill_queries = 5;
    in.dtype = DType::f16;
    // keys + values 47 x 16 each, queries 4 x 7 x 16, prefill 4 x 5 x 16; 4 bytes decoded + 2 raw
    EXPECT_DOUBLE_EQ(head_slice_bytes(in), (2.0 * 47 * 16 + 4 * 7 * 16 + 4 * 5 * 16) * 6);
    EXPECT_DOUBLE_EQ(head_slice_bytes(in, 2, false), (2.0 * 42 * 16 + 4 * 2 * 16) * 6);
    in.dtype = DType::f32;
    EXPECT_DOUBLE_EQ(head_slice_bytes(in, 2, false), (2.0 * 42 * 16 + 4 * 2 * 16) * 4);
    in.prompt_len = 1 << 30;  // a header's largest sizes: the estimate stays exact in a double
    in.head_dim = 1 << 30;
    EXPECT_GT(head_slice_bytes(in), 1e18);
}

TEST(Memory, SynthEstimateIsOneKvHeadNotTheLayer) {
    SynthParams p = SynthParams::preset("llama3-8b");
    p.prompt_len = 8 << 20;
    const MemoryEstimate big = estimate_synth_memory(p, "big.h5");
    // synthesize() streams a KV head at a time: 8M tokens x 128 dims, keys and values, float32 + float16
    // (~12 GiB) and the layer's RoPE table [n, d] float32 (4 GiB), not the layer's 8 KV heads (~96 GiB)
    const double head = 2.0 * (8 << 20) * 128 * 6, rope = (8 << 20) * 128 * 4.0;
    EXPECT_GT(big.bytes, head + rope);
    EXPECT_LT(big.bytes, 1.1 * (head + rope));
    EXPECT_NE(big.what.find("big.h5"), std::string::npos);
    EXPECT_NE(big.what.find("one KV head at a time"), std::string::npos);
    SynthParams mha = p;  // 4x the KV heads (groups of 1 instead of 4): no more memory, one head at a time
    mha.num_kv_heads = 32;
    EXPECT_LE(estimate_synth_memory(mha, "big.h5").bytes, big.bytes);
    EXPECT_GT(estimate_synth_memory(mha, "big.h5").bytes, head + rope);
    p.prompt_len = 1024;
    EXPECT_LT(estimate_synth_memory(p, "s.h5").bytes, big.bytes / 1000);
}
