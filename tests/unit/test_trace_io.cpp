// Trace format v1: writer/reader round trips for every dtype, GQA head mapping, prefill queries,
// truncation, extra attributes, and one TraceError per kind of bad file (built in a temp dir).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <thread>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/memory.hpp"
#include "trace/h5util.hpp"
#include "trace/reader.hpp"
#include "trace/writer.hpp"

using namespace retro;
namespace fs = std::filesystem;

namespace {

struct TempDir {
    std::string path;
    TempDir() {
        char tmpl[] = "/tmp/retro-trace-test-XXXXXX";
        const char* p = mkdtemp(tmpl);
        if (!p) throw std::runtime_error("mkdtemp failed");
        path = p;
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::string operator/(const std::string& name) const { return path + "/" + name; }
};

TraceInfo make_info(DType dt, int q = 8, int kv = 2, int d = 16, int prompt = 40, int steps = 7) {
    TraceInfo in;
    in.model = "test-model";
    in.num_layers = 4;
    in.num_q_heads = q;
    in.num_kv_heads = kv;
    in.head_dim = d;
    in.prompt_len = prompt;
    in.num_decode_steps = steps;
    in.rope_applied = true;
    in.rope_layout = "interleaved";
    in.rope_theta = 500000.0;
    in.source = "synthetic:test";
    in.dtype = dt;
    return in;
}

/// Random values spanning small and large magnitudes with both signs (within float16 range), plus
/// exact zeros and float16 subnormals.
std::vector<float> random_values(size_t n, std::mt19937& rng) {
    std::uniform_real_distribution<float> expo(-6.0f, 3.8f);  // |x| < 65504
    std::uniform_real_distribution<float> mant(1.0f, 9.99f);
    std::bernoulli_distribution neg(0.5);
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) {
        float v = mant(rng) * std::pow(10.0f, expo(rng));
        if (i % 97 == 5) v = 0.0f;
        if (i % 89 == 7) v = 3e-7f;  // float16 subnormal
        x[i] = neg(rng) ? -v : v;
    }
    return x;
}

/// One layer's arrays. Element [h, t, 0] holds code(layer, h, t), a small integer exact in every dtype
/// (< 256 for bfloat16), so a slice taken from the wrong layer, head or token shows up directly.
struct LayerData {
    std::vector<float> keys, values, queries, prefill;
};

float code(int layer, int head, int pos) { return (float)(layer * 64 + head * 8 + pos % 8); }

LayerData make_layer(const TraceInfo& in, int layer, int n_prefill, unsigned seed) {
    std::mt19937 rng(seed);
    LayerData L;
    const int d = in.head_dim, n = in.n_tokens();
    L.keys = random_values((size_t)in.num_kv_heads * n * d, rng);
    L.values = random_values((size_t)in.num_kv_heads * n * d, rng);
    L.queries = random_values((size_t)in.num_q_heads * in.num_decode_steps * d, rng);
    L.prefill = random_values((size_t)in.num_q_heads * n_prefill * d, rng);
    for (int h = 0; h < in.num_kv_heads; ++h)
        for (int t = 0; t < n; ++t) {
            L.keys[((size_t)h * n + t) * d] = code(layer, h, t);
            L.values[((size_t)h * n + t) * d] = -code(layer, h, t);
        }
    for (int h = 0; h < in.num_q_heads; ++h) {
        for (int t = 0; t < in.num_decode_steps; ++t)
            L.queries[((size_t)h * in.num_decode_steps + t) * d] = code(layer, h, t);
        for (int j = 0; j < n_prefill; ++j) L.prefill[((size_t)h * n_prefill + j) * d] = code(layer, h, j);
    }
    return L;
}

float round_to(DType t, float x) {
    switch (t) {
        case DType::f16: return half_to_float(float_to_half(x));
        case DType::bf16: return bf16_to_float(float_to_bf16(x));
        default: return x;
    }
}

/// Writes layers {0, 2} of a 4-layer GQA trace (8 q / 2 kv heads). Returns the data written.
std::map<int, LayerData> write_trace(const std::string& path, const TraceInfo& in, int n_prefill = 0,
                                     WriteOptions opt = {}) {
    std::map<int, LayerData> data;
    TraceWriter w(path, in, opt);
    for (int l : {0, 2}) {
        data[l] = make_layer(in, l, n_prefill, 1234 + l);
        w.write_layer(l, data[l].keys, data[l].values, data[l].queries, data[l].prefill, n_prefill,
                      in.prompt_len - n_prefill - 3 * (n_prefill > 0));
    }
    w.finish();
    return data;
}

/// Expects `fn` to throw TraceError whose message contains every string in `parts`.
void expect_trace_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
    try {
        fn();
        ADD_FAILURE() << "no TraceError thrown; expected one mentioning " << parts.at(0);
    } catch (const TraceError& e) {
        const std::string msg = e.what();
        for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
}

/// Opens `path` read-write under the HDF5 lock and hands the file id to `fn`.
void modify(const std::string& path, const std::function<void(hid_t)>& fn) {
    h5::Lock lk;
    h5::Hid f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    ASSERT_TRUE(f.valid()) << path;
    fn(f);
}

/// Replaces dataset `name` by an (unwritten, zero-filled) one of type `type` and shape `dims`.
void replace_dataset(hid_t file, const char* name, hid_t type, std::vector<hsize_t> dims) {
    ASSERT_GE(H5Ldelete(file, name, H5P_DEFAULT), 0) << name;
    h5::Hid space(H5Screate_simple((int)dims.size(), dims.data(), nullptr));
    h5::Hid ds(H5Dcreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    ASSERT_TRUE(ds.valid()) << name;
}

// ------------------------------------------------------------------------------------------------
// Round trips

class TraceIORoundTrip : public ::testing::TestWithParam<std::tuple<DType, int, int>> {};

TEST_P(TraceIORoundTrip, EveryHeadExactAfterRounding) {
    const auto [dt, n_prefill, gzip] = GetParam();
    TempDir tmp;
    const std::string path = tmp / "t.h5";
    const TraceInfo in = make_info(dt);
    WriteOptions opt;
    opt.chunk_tokens = 16;  // several chunks per head
    opt.gzip_level = gzip;
    const auto data = write_trace(path, in, n_prefill, opt);

    TraceReader r(path);
    const TraceInfo& info = r.info();
    EXPECT_EQ(info.layers, (std::vector<int>{0, 2}));
    EXPECT_EQ(info.dtype, dt);
    EXPECT_EQ(info.num_prefill_queries, n_prefill);
    EXPECT_EQ(info.prefill_first_position, n_prefill > 0 ? in.prompt_len - n_prefill - 3 : 0);
    EXPECT_TRUE(r.has_layer(2));
    EXPECT_FALSE(r.has_layer(1));
    const int d = in.head_dim, n = in.n_tokens(), S = in.num_decode_steps, G = 4;
    for (int l : {0, 2}) {
        const LayerData& L = data.at(l);
        for (int kv = 0; kv < in.num_kv_heads; ++kv) {
            const HeadSlice s = r.read_head(l, kv);
            ASSERT_EQ(s.layer, l);
            ASSERT_EQ(s.kv_head, kv);
            ASSERT_EQ(s.group, G);
            ASSERT_EQ(s.first_q_head, kv * G);
            ASSERT_EQ(s.num_steps, S);
            ASSERT_EQ(s.n_tokens(), n);
            ASSERT_EQ(s.keys.size(), (size_t)n * d);
            ASSERT_EQ(s.values.size(), (size_t)n * d);
            ASSERT_EQ(s.queries.size(), (size_t)G * S * d);
            ASSERT_EQ(s.num_prefill, n_prefill);
            ASSERT_EQ(s.prefill_queries.size(), (size_t)G * n_prefill * d);
            for (int t = 0; t < n; ++t) {
                ASSERT_EQ(s.key(t)[0], code(l, kv, t)) << "layer " << l << " kv " << kv << " token " << t;
                for (int i = 0; i < d; ++i) {
                    const size_t src = ((size_t)kv * n + t) * d + i;
                    ASSERT_EQ(s.key(t)[i], round_to(dt, L.keys[src])) << t << "," << i;
                    ASSERT_EQ(s.value(t)[i], round_to(dt, L.values[src])) << t << "," << i;
                }
            }
            for (int g = 0; g < G; ++g) {
                const int h = kv * G + g;
                for (int t = 0; t < S; ++t) {
                    ASSERT_EQ(s.query(g, t)[0], code(l, h, t)) << "query head " << h << " step " << t;
                    for (int i = 0; i < d; ++i)
                        ASSERT_EQ(s.query(g, t)[i], round_to(dt, L.queries[((size_t)h * S + t) * d + i]));
                }
                for (int j = 0; j < n_prefill; ++j) {
                    ASSERT_EQ(s.prefill_query(g, j)[0], code(l, h, j));
                    for (int i = 0; i < d; ++i)
                        ASSERT_EQ(s.prefill_query(g, j)[i],
                                  round_to(dt, L.prefill[((size_t)h * n_prefill + j) * d + i]));
                }
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(TraceIO, TraceIORoundTrip,
                         ::testing::Combine(::testing::Values(DType::f16, DType::bf16, DType::f32),
                                            ::testing::Values(0, 5), ::testing::Values(0, 4)));

TEST(TraceIO, RoundingIsNonTrivial) {
    // The random data must actually exercise rounding, or the exactness checks above prove little.
    std::mt19937 rng(1);
    const auto x = random_values(1000, rng);
    int changed16 = 0, changedbf = 0;
    for (float v : x) {
        changed16 += round_to(DType::f16, v) != v;
        changedbf += round_to(DType::bf16, v) != v;
    }
    EXPECT_GT(changed16, 500);
    EXPECT_GT(changedbf, 500);
}

TEST(TraceIO, AttributesAndExtraRoundTrip) {
    TempDir tmp;
    const std::string path = tmp / "t.h5";
    TraceInfo in = make_info(DType::bf16);
    in.rope_applied = false;
    in.extra["generated_text"] = "Hello, world \xE2\x9C\x93";
    in.extra["prompt_source"] = "longbench/qasper#12";
    in.extra["empty"] = "";
    write_trace(path, in);
    TraceReader r(path);
    const TraceInfo& o = r.info();
    EXPECT_EQ(o.path, path);
    EXPECT_EQ(o.version, 1);
    EXPECT_EQ(o.model, "test-model");
    EXPECT_EQ(o.num_layers, 4);
    EXPECT_EQ(o.num_q_heads, 8);
    EXPECT_EQ(o.num_kv_heads, 2);
    EXPECT_EQ(o.head_dim, 16);
    EXPECT_EQ(o.prompt_len, 40);
    EXPECT_EQ(o.num_decode_steps, 7);
    EXPECT_FALSE(o.rope_applied);
    EXPECT_EQ(o.rope_layout, "interleaved");
    EXPECT_EQ(o.rope_theta, 500000.0);
    EXPECT_EQ(o.source, "synthetic:test");
    EXPECT_EQ(o.dtype, DType::bf16);
    EXPECT_EQ(o.extra, in.extra);
    EXPECT_EQ(o.group_size(), 4);
}

TEST(TraceIO, NumericExtraAttributesAreStringified) {
    TempDir tmp;
    const std::string path = tmp / "t.h5";
    write_trace(path, make_info(DType::f32));
    modify(path, [](hid_t f) {
        h5::write_attr_int(f, "seed", 42);
        h5::write_attr_double(f, "temperature", 0.5);
    });
    TraceReader r(path);
    EXPECT_EQ(r.info().extra.at("seed"), "42");
    EXPECT_EQ(r.info().extra.at("temperature"), "0.5");
}

TEST(TraceIO, StorageTypesChunksAndAttributes) {
    TempDir tmp;
    for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
        const std::string path = tmp / (std::string(dtype_name(dt)) + ".h5");
        WriteOptions opt;
        opt.chunk_tokens = 32;
        write_trace(path, make_info(dt), 5, opt);
        h5::Lock lk;
        h5::Hid f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
        ASSERT_TRUE(f.valid());
        for (const char* name :
             {"/layers/2/keys", "/layers/2/values", "/layers/2/queries", "/layers/2/prefill_queries"}) {
            h5::Hid ds(H5Dopen2(f, name, H5P_DEFAULT));
            ASSERT_TRUE(ds.valid()) << name;
            h5::Hid t(H5Dget_type(ds));
            if (dt == DType::f16) {
                EXPECT_EQ(H5Tget_class(t), H5T_FLOAT);
                EXPECT_EQ(H5Tget_size(t), 2u);
                EXPECT_EQ(H5Tget_ebias(t), 15u);
            } else if (dt == DType::bf16) {
                EXPECT_GT(H5Tequal(t, H5T_STD_U16LE), 0);
                const auto a = h5::read_attr(ds, "bfloat16");
                ASSERT_TRUE(a.has_value());
                EXPECT_EQ(a->i, 1);
            } else {
                EXPECT_GT(H5Tequal(t, H5T_IEEE_F32LE), 0);
            }
            h5::Hid dcpl(H5Dget_create_plist(ds));
            hsize_t chunk[3] = {0, 0, 0};
            ASSERT_EQ(H5Pget_chunk(dcpl, 3, chunk), 3);
            h5::Hid space(H5Dget_space(ds));
            hsize_t dims[3];
            H5Sget_simple_extent_dims(space, dims, nullptr);
            EXPECT_EQ(chunk[0], 1u);
            EXPECT_EQ(chunk[1], std::min<hsize_t>(32, dims[1])) << name;
            EXPECT_EQ(chunk[2], 16u);
        }
        h5::Hid ds(H5Dopen2(f, "/layers/0/prefill_queries", H5P_DEFAULT));
        EXPECT_EQ(h5::read_attr(ds, "first_position")->i, 40 - 5 - 3);
    }
}

TEST(TraceIO, MaxStepsTruncatesQueriesAndTokens) {
    TempDir tmp;
    const std::string path = tmp / "t.h5";
    const TraceInfo in = make_info(DType::f16);
    const auto data = write_trace(path, in, 5);
    TraceReader r(path);
    ReadOptions ro;
    ro.max_steps = 3;
    ro.prefill_queries = false;
    const HeadSlice s = r.read_head(2, 1, ro);
    EXPECT_EQ(s.num_steps, 3);
    EXPECT_EQ(s.n_tokens(), in.prompt_len + 3);
    EXPECT_EQ(s.keys.size(), (size_t)(in.prompt_len + 3) * in.head_dim);
    EXPECT_EQ(s.values.size(), s.keys.size());
    EXPECT_EQ(s.queries.size(), (size_t)4 * 3 * in.head_dim);
    EXPECT_EQ(s.num_prefill, 0);
    EXPECT_TRUE(s.prefill_queries.empty());
    EXPECT_EQ(s.visible(2), in.prompt_len + 3);
    // query of head 4 + g at step t, not the untruncated layout
    const int S = in.num_decode_steps, d = in.head_dim;
    for (int g = 0; g < 4; ++g)
        for (int t = 0; t < 3; ++t)
            for (int i = 0; i < d; ++i)
                ASSERT_EQ(s.query(g, t)[i],
                          round_to(DType::f16, data.at(2).queries[((size_t)(4 + g) * S + t) * d + i]));
    const int n = in.n_tokens();
    for (int t = 0; t < in.prompt_len + 3; ++t)
        ASSERT_EQ(s.key(t)[1], round_to(DType::f16, data.at(2).keys[((size_t)n + t) * d + 1]));
    ro.max_steps = 1000;  // more than the trace has: all
    EXPECT_EQ(r.read_head(0, 0, ro).num_steps, S);
    ro.max_steps = 0;
    const HeadSlice z = r.read_head(0, 0, ro);
    EXPECT_EQ(z.num_steps, 0);
    EXPECT_EQ(z.n_tokens(), in.prompt_len);
    EXPECT_TRUE(z.queries.empty());
}

TEST(TraceIO, ConcurrentReadsMatchSerialReads) {
    TempDir tmp;
    const std::string path = tmp / "t.h5";
    const TraceInfo in = make_info(DType::f16, 8, 4, 32, 300, 9);
    WriteOptions opt;
    opt.chunk_tokens = 64;
    opt.gzip_level = 1;
    write_trace(path, in, 4, opt);
    TraceReader r(path);
    std::vector<HeadSlice> serial;
    for (int l : {0, 2})
        for (int h = 0; h < 4; ++h) serial.push_back(r.read_head(l, h));
    std::vector<std::thread> threads;
    std::vector<int> ok(4, 1);
    for (int th = 0; th < 4; ++th)
        threads.emplace_back([&, th] {
            for (int rep = 0; rep < 10; ++rep) {
                size_t i = 0;
                for (int l : {0, 2})
                    for (int h = 0; h < 4; ++h, ++i) {
                        const HeadSlice s = r.read_head(l, (h + th) % 4);
                        const HeadSlice& e = serial[i - h + (h + th) % 4];
                        if (s.keys != e.keys || s.values != e.values || s.queries != e.queries ||
                            s.prefill_queries != e.prefill_queries)
                            ok[th] = 0;
                    }
            }
        });
    for (auto& t : threads) t.join();
    for (int th = 0; th < 4; ++th) EXPECT_EQ(ok[th], 1) << "thread " << th;
}

// ------------------------------------------------------------------------------------------------
// Writer behaviour

TEST(TraceIO, WriterWithoutFinishLeavesNoFile) {
    TempDir tmp;
    const std::string path = tmp / "t.h5";
    const TraceInfo in = make_info(DType::f16);
    {
        TraceWriter w(path, in);
        const LayerData L = make_layer(in, 0, 0, 7);
        w.write_layer(0, L.keys, L.values, L.queries);
        EXPECT_FALSE(fs::exists(path));  // nothing under the final name before finish()
    }
    EXPECT_TRUE(fs::is_empty(tmp.path)) << "temp file left behind";
    {
        TraceWriter w(path, in);  // no layer at all
    }
    EXPECT_TRUE(fs::is_empty(tmp.path));
}

TEST(TraceIO, WriterReplacesExistingFileAtomically) {
    TempDir tmp;
    const std::string path = tmp / "t.h5";
    write_trace(path, make_info(DType::f16));
    write_trace(path, make_info(DType::f32));
    EXPECT_EQ(TraceReader(path).info().dtype, DType::f32);
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(tmp.path)) names.push_back(e.path().filename());
    EXPECT_EQ(names, std::vector<std::string>{"t.h5"});
}

TEST(TraceIO, WriterValidatesInfo) {
    TempDir tmp;
    const std::string path = tmp / "t.h5";
    auto bad = [&](const std::function<void(TraceInfo&)>& edit, std::vector<std::string> parts) {
        TraceInfo in = make_info(DType::f16);
        edit(in);
        parts.insert(parts.begin(), path);
        expect_trace_error([&] { TraceWriter w(path, in); }, parts);
    };
    bad([](TraceInfo& i) { i.num_kv_heads = 3; }, {"num_q_heads (8)", "num_kv_heads (3)"});
    bad([](TraceInfo& i) { i.head_dim = 0; }, {"head_dim", ">= 1"});
    bad([](TraceInfo& i) { i.prompt_len = -1; }, {"prompt_len", ">= 1"});
    bad([](TraceInfo& i) { i.num_decode_steps = 0; }, {"num_decode_steps"});
    bad([](TraceInfo& i) { i.num_layers = 0; }, {"num_layers"});
    bad([](TraceInfo& i) { i.rope_layout = "neox"; }, {"rope_layout", "neox", "half_split"});
    bad([](TraceInfo& i) { i.extra["dtype"] = "x"; }, {"extra attribute 'dtype'"});
    expect_trace_error([&] { TraceWriter w(tmp / "no/such/dir/t.h5", make_info(DType::f16)); },
                       {tmp / "no/such/dir/t.h5", "directory", "does not exist"});
    WriteOptions o;
    o.gzip_level = 12;
    expect_trace_error([&] { TraceWriter w(path, make_info(DType::f16), o); }, {path, "gzip_level"});
    EXPECT_TRUE(fs::is_empty(tmp.path));
}

TEST(TraceIO, WriterValidatesLayers) {
    TempDir tmp;
    const std::string path = tmp / "t.h5";
    const TraceInfo in = make_info(DType::f16);
    const LayerData L = make_layer(in, 0, 5, 3);
    TraceWriter w(path, in);
    std::vector<float> short_keys(L.keys.begin(), L.keys.end() - 1);
    expect_trace_error([&] { w.write_layer(0, short_keys, L.values, L.queries); },
                       {path, "/layers/0/keys", "given 1503", "expected 1504", "[2, 47, 16]",
                        "num_kv_heads, prompt_len + num_decode_steps, head_dim"});
    expect_trace_error([&] { w.write_layer(1, L.keys, L.values, L.keys); },
                       {path, "/layers/1/queries", "expected 896", "[8, 7, 16]"});
    expect_trace_error([&] { w.write_layer(4, L.keys, L.values, L.queries); }, {path, "layer 4", "num_layers"});
    expect_trace_error([&] { w.write_layer(0, L.keys, L.values, L.queries, L.prefill, 4, 0); },
                       {path, "/layers/0/prefill_queries", "[8, 4, 16]"});
    expect_trace_error([&] { w.write_layer(0, L.keys, L.values, L.queries, L.prefill, 5, 36); },
                       {path, "first_position 36", "prompt_len = 40"});
    std::vector<float> nan_keys = L.keys;
    nan_keys[16 * 47 + 16 * 3 + 2] = NAN;
    expect_trace_error([&] { w.write_layer(0, nan_keys, L.values, L.queries); },
                       {path, "/layers/0/keys", "(head 1, token 3, dim 2)", "not finite"});
    std::vector<float> big = L.values;
    big[5] = 70000.0f;
    expect_trace_error([&] { w.write_layer(0, L.keys, big, L.queries); },
                       {path, "/layers/0/values", "overflows float16"});
    w.write_layer(0, L.keys, L.values, L.queries, L.prefill, 5, 30);
    expect_trace_error([&] { w.write_layer(0, L.keys, L.values, L.queries, L.prefill, 5, 30); },
                       {path, "layer 0 written twice"});
    expect_trace_error([&] { w.write_layer(1, L.keys, L.values, L.queries); },
                       {path, "/layers/1/prefill_queries", "first layer"});
    w.finish();
    EXPECT_EQ(TraceReader(path).info().num_prefill_queries, 5);

    TraceWriter empty(tmp / "e.h5", in);
    expect_trace_error([&] { empty.finish(); }, {tmp / "e.h5", "no layer"});
}

// Streaming (synthesize's path): KV heads written one at a time, in any order, give the same file
// contents as the whole layer; an incomplete layer is refused naming the heads it lacks.
TEST(TraceIO, StreamedKvHeadsEqualTheWholeLayer) {
    TempDir tmp;
    const TraceInfo in = make_info(DType::bf16, 12, 4, 16, 40, 7);  // GQA group 3
    const int npf = 5, first = 30, d = in.head_dim, n = in.n_tokens(), grp = 3;
    const LayerData L = make_layer(in, 1, npf, 9);
    {
        TraceWriter w(tmp / "whole.h5", in);
        w.write_layer(1, L.keys, L.values, L.queries, L.prefill, npf, first);
        w.finish();
    }
    const auto rows = [](const std::vector<float>& x, size_t begin, size_t count) {
        return std::vector<float>(x.begin() + (ptrdiff_t)begin, x.begin() + (ptrdiff_t)(begin + count));
    };
    {
        TraceWriter w(tmp / "streamed.h5", in);
        w.begin_layer(1, npf, first);
        for (int g : {2, 0, 3, 1}) {
            const size_t kv = (size_t)n * d, q = (size_t)grp * in.num_decode_steps * d, pf = (size_t)grp * npf * d;
            w.write_kv_head(1, g, rows(L.keys, g * kv, kv), rows(L.values, g * kv, kv), rows(L.queries, g * q, q),
                            rows(L.prefill, g * pf, pf));
        }
        w.finish();
    }
    const TraceReader a(tmp / "whole.h5"), b(tmp / "streamed.h5");
    EXPECT_EQ(b.info().num_prefill_queries, npf);
    EXPECT_EQ(b.info().prefill_first_position, first);
    for (int g = 0; g < in.num_kv_heads; ++g) {
        const HeadSlice x = a.read_head(1, g), y = b.read_head(1, g);
        EXPECT_EQ(x.keys, y.keys) << g;
        EXPECT_EQ(x.values, y.values) << g;
        EXPECT_EQ(x.queries, y.queries) << g;
        EXPECT_EQ(x.prefill_queries, y.prefill_queries) << g;
        EXPECT_EQ(y.keys[0], round_to(DType::bf16, L.keys[(size_t)g * n * d])) << g;  // really head g's rows
    }

    const std::string path = tmp / "bad.h5";
    TraceWriter w(path, in);
    const std::vector<float> k((size_t)n * d, 0.5f), q((size_t)grp * in.num_decode_steps * d, 0.25f);
    expect_trace_error([&] { w.write_kv_head(0, 0, k, k, q); }, {path, "without begin_layer(0)"});
    w.begin_layer(0);
    expect_trace_error([&] { w.write_kv_head(0, 4, k, k, q); }, {path, "KV head 4", "num_kv_heads"});
    expect_trace_error([&] { w.write_kv_head(0, 1, k, k, k); }, {path, "KV head 1", "queries", "[3, 7, 16]"});
    std::vector<float> nan_k = k;
    nan_k[(size_t)3 * d + 2] = NAN;
    expect_trace_error([&] { w.write_kv_head(0, 1, nan_k, k, q); }, {path, "keys", "(head 1, token 3, dim 2)"});
    w.write_kv_head(0, 1, k, k, q);  // a refused head can be written again
    expect_trace_error([&] { w.write_kv_head(0, 1, k, k, q); }, {path, "KV head 1", "written twice"});
    w.write_kv_head(0, 3, k, k, q);
    expect_trace_error([&] { w.finish(); }, {path, "layer 0 incomplete", "KV head(s) 0, 2 of 4 not written"});
    expect_trace_error([&] { w.begin_layer(2); }, {path, "layer 0 incomplete", "0, 2"});
}

// ------------------------------------------------------------------------------------------------
// Reader validation: one bad file per error kind

class TraceIOBad : public ::testing::Test {
  protected:
    TempDir tmp;
    std::string path = tmp / "bad.h5";
    TraceInfo in = make_info(DType::f16);
    void SetUp() override { write_trace(path, in, 5); }
    void expect_open_error(const std::vector<std::string>& parts) {
        std::vector<std::string> all = parts;
        all.insert(all.begin(), path + ": ");
        expect_trace_error([&] { TraceReader r(path); }, all);
    }
    void remove_attr(const char* name) {
        modify(path, [&](hid_t f) { ASSERT_GE(H5Adelete(f, name), 0); });
    }
    void set_int(const char* name, long long v) {
        modify(path, [&](hid_t f) { h5::write_attr_int(f, name, v); });
    }
    void set_string(const char* name, const std::string& v) {
        modify(path, [&](hid_t f) { h5::write_attr_string(f, name, v); });
    }
};

TEST_F(TraceIOBad, GoodFileOpens) { EXPECT_NO_THROW(TraceReader r(path)); }

TEST_F(TraceIOBad, MissingFile) {
    const std::string p = tmp / "nope.h5";
    expect_trace_error([&] { TraceReader r(p); }, {"trace file not found: " + p});
}

TEST_F(TraceIOBad, NotHdf5) {
    std::ofstream(path, std::ios::trunc) << "this is not an HDF5 file\n";
    expect_open_error({"not a readable HDF5 file (truncated or corrupt?)"});
}

TEST_F(TraceIOBad, Truncated) {
    for (double frac : {0.5, 0.9, 0.01}) {
        write_trace(path, in, 5);
        const auto size = fs::file_size(path);
        ASSERT_EQ(::truncate(path.c_str(), (off_t)(size * frac)), 0);
        expect_open_error({"not a readable HDF5 file (truncated or corrupt?)"});
    }
}

TEST_F(TraceIOBad, Directory) {
    path = tmp / "dir.h5";
    fs::create_directory(path);
    expect_open_error({"is a directory"});
}

TEST_F(TraceIOBad, WrongFormat) {
    set_string("format", "something-else");
    expect_open_error({"'format'", "something-else", "expected \"retro-trace\""});
    remove_attr("format");
    expect_open_error({"missing root attribute 'format'", "retro-trace"});
}

TEST_F(TraceIOBad, WrongVersion) {
    set_int("version", 2);
    expect_open_error({"'version' is 2", "expected 1"});
}

TEST_F(TraceIOBad, MissingRequiredAttributes) {
    for (const char* name : {"version", "num_layers", "num_q_heads", "num_kv_heads", "head_dim", "prompt_len",
                             "num_decode_steps", "rope_applied", "rope_layout", "rope_theta", "dtype"}) {
        write_trace(path, in, 5);
        remove_attr(name);
        expect_open_error({std::string("missing root attribute '") + name + "'", "expected"});
    }
    // model and source are provenance only: optional
    write_trace(path, in, 5);
    remove_attr("model");
    remove_attr("source");
    EXPECT_NO_THROW(TraceReader r(path));
}

TEST_F(TraceIOBad, AttributeOfWrongType) {
    set_string("head_dim", "sixteen");
    expect_open_error({"'head_dim' is string", "expected a scalar integer"});
}

TEST_F(TraceIOBad, BadAttributeValues) {
    set_string("dtype", "float8");
    expect_open_error({"'dtype' is \"float8\"", "\"float16\", \"bfloat16\" or \"float32\""});
    write_trace(path, in, 5);
    set_string("rope_layout", "neox");
    expect_open_error({"'rope_layout' is \"neox\"", "half_split"});
    write_trace(path, in, 5);
    set_int("rope_applied", 2);
    expect_open_error({"'rope_applied' is 2", "0 or 1"});
}

TEST_F(TraceIOBad, GqaCountsDoNotDivide) {
    set_int("num_kv_heads", 3);
    expect_open_error({"num_q_heads (8) is not a multiple of num_kv_heads (3)"});
}

TEST_F(TraceIOBad, PromptLenOrStepsBelowOne) {
    set_int("prompt_len", 0);
    expect_open_error({"'prompt_len' is 0", ">= 1"});
    write_trace(path, in, 5);
    set_int("num_decode_steps", 0);
    expect_open_error({"'num_decode_steps' is 0", ">= 1"});
}

TEST_F(TraceIOBad, NoLayersGroup) {
    modify(path, [](hid_t f) { ASSERT_GE(H5Ldelete(f, "/layers", H5P_DEFAULT), 0); });
    expect_open_error({"missing group /layers"});
}

TEST_F(TraceIOBad, NoLayers) {
    modify(path, [](hid_t f) {
        ASSERT_GE(H5Ldelete(f, "/layers/0", H5P_DEFAULT), 0);
        ASSERT_GE(H5Ldelete(f, "/layers/2", H5P_DEFAULT), 0);
    });
    expect_open_error({"/layers has no layer groups"});
}

TEST_F(TraceIOBad, LayerIndexBeyondNumLayers) {
    set_int("num_layers", 2);
    expect_open_error({"/layers/2", "layer index 2 >= num_layers (2)"});
}

TEST_F(TraceIOBad, LayerNameNotAnIndex) {
    modify(path, [](hid_t f) { h5::Hid g(H5Gcreate2(f, "/layers/foo", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)); });
    expect_open_error({"/layers/foo", "layer indices"});
}

TEST_F(TraceIOBad, MissingDatasets) {
    for (const char* ds : {"keys", "values", "queries"}) {
        write_trace(path, in, 5);
        const std::string name = std::string("/layers/2/") + ds;
        modify(path, [&](hid_t f) { ASSERT_GE(H5Ldelete(f, name.c_str(), H5P_DEFAULT), 0); });
        expect_open_error({name + " is missing", "expected dataset ["});
    }
}

TEST_F(TraceIOBad, WrongRank) {
    modify(path, [](hid_t f) { replace_dataset(f, "/layers/0/queries", H5T_IEEE_F32LE, {8, 7}); });
    expect_open_error({"/layers/0/queries has rank 2, expected 3", "[8, 7, 16]"});
}

TEST_F(TraceIOBad, WrongShape) {
    modify(path, [](hid_t f) {
        h5::Hid t = h5::make_f16_type();
        replace_dataset(f, "/layers/2/keys", t, {2, 100, 16});
    });
    expect_open_error({"/layers/2/keys has shape [2, 100, 16], expected [2, 47, 16] (num_kv_heads, prompt_len + "
                       "num_decode_steps, head_dim)"});
    write_trace(path, in, 5);
    modify(path, [](hid_t f) {
        h5::Hid t = h5::make_f16_type();
        replace_dataset(f, "/layers/0/queries", t, {8, 6, 16});
    });
    expect_open_error({"/layers/0/queries has shape [8, 6, 16], expected [8, 7, 16] (num_q_heads, "
                       "num_decode_steps, head_dim)"});
}

TEST_F(TraceIOBad, WrongOrUnsupportedDtype) {
    modify(path, [](hid_t f) { replace_dataset(f, "/layers/2/values", H5T_IEEE_F64LE, {2, 47, 16}); });
    expect_open_error({"/layers/2/values has HDF5 type float64 (8 bytes)", "expected IEEE float16",
                       "dtype = float16"});
    write_trace(path, in, 5);
    modify(path, [](hid_t f) {
        h5::Hid t(H5Tcopy(H5T_C_S1));
        H5Tset_size(t, 4);
        replace_dataset(f, "/layers/0/keys", t, {2, 47, 16});
    });
    expect_open_error({"/layers/0/keys has HDF5 type string", "unsupported dtype class"});
    write_trace(path, in, 5);
    set_string("dtype", "bfloat16");  // file holds float16 datasets
    expect_open_error({"/layers/0/keys has HDF5 type float16 (2 bytes)", "bfloat16"});
}

TEST_F(TraceIOBad, PrefillInconsistentAcrossLayers) {
    modify(path, [](hid_t f) { ASSERT_GE(H5Ldelete(f, "/layers/2/prefill_queries", H5P_DEFAULT), 0); });
    expect_open_error({"/layers/2 has no prefill_queries", "/layers/0 has prefill_queries with n_prefill 5"});
    write_trace(path, in, 5);
    modify(path, [](hid_t f) {
        h5::Hid t = h5::make_f16_type();
        replace_dataset(f, "/layers/2/prefill_queries", t, {8, 4, 16});
        h5::Hid ds(H5Dopen2(f, "/layers/2/prefill_queries", H5P_DEFAULT));
        h5::write_attr_int(ds, "first_position", 32);
    });
    expect_open_error({"/layers/2 has prefill_queries with n_prefill 4, first_position 32",
                       "/layers/0 has prefill_queries with n_prefill 5, first_position 32"});
}

TEST_F(TraceIOBad, PrefillBeyondPrompt) {
    modify(path, [](hid_t f) {
        h5::Hid ds(H5Dopen2(f, "/layers/0/prefill_queries", H5P_DEFAULT));
        h5::write_attr_int(ds, "first_position", 36);
    });
    expect_open_error({"/layers/0/prefill_queries", "first_position 36 + n_prefill 5 exceeds prompt_len 40"});
    write_trace(path, in, 5);
    modify(path, [](hid_t f) {
        h5::Hid ds(H5Dopen2(f, "/layers/0/prefill_queries", H5P_DEFAULT));
        ASSERT_GE(H5Adelete(ds, "first_position"), 0);
    });
    expect_open_error({"/layers/0/prefill_queries has no attribute 'first_position'"});
    write_trace(path, in, 5);
    modify(path, [](hid_t f) {
        h5::Hid t = h5::make_f16_type();
        replace_dataset(f, "/layers/0/prefill_queries", t, {4, 5, 16});
    });
    expect_open_error({"/layers/0/prefill_queries has shape [4, 5, 16]", "num_q_heads, n_prefill, head_dim"});
}

// Issue 16 defect 5: first_position + n_prefill overflowed int64 for first_position near INT64_MAX, so
// the trace validated and ran with prefill queries at wrong (negative) positions.
TEST_F(TraceIOBad, PrefillFirstPositionNearInt64MaxIsRejected) {
    for (long long fp : {std::numeric_limits<long long>::max(), std::numeric_limits<long long>::max() - 3,
                         (long long)std::numeric_limits<int>::max()}) {
        write_trace(path, in, 5);
        modify(path, [&](hid_t f) {
            h5::Hid ds(H5Dopen2(f, "/layers/0/prefill_queries", H5P_DEFAULT));
            h5::write_attr_int(ds, "first_position", fp);
        });
        expect_open_error({"/layers/0/prefill_queries", "first_position " + std::to_string(fp) +
                                                            " + n_prefill 5 exceeds prompt_len 40"});
    }
    write_trace(path, in, 5);
    modify(path, [&](hid_t f) {
        h5::Hid ds(H5Dopen2(f, "/layers/0/prefill_queries", H5P_DEFAULT));
        h5::write_attr_int(ds, "first_position", std::numeric_limits<long long>::min());
    });
    expect_open_error({"/layers/0/prefill_queries", "first_position -9223372036854775808"});
}

// More prefill queries than prompt positions: rejected by shape before n_prefill is narrowed to int.
TEST_F(TraceIOBad, PrefillLongerThanPrompt) {
    modify(path, [](hid_t f) {
        h5::Hid t = h5::make_f16_type();
        for (const char* name : {"/layers/0/prefill_queries", "/layers/2/prefill_queries"}) {
            replace_dataset(f, name, t, {8, 41, 16});
            h5::Hid ds(H5Dopen2(f, name, H5P_DEFAULT));
            h5::write_attr_int(ds, "first_position", 0);
        }
    });
    expect_open_error({"/layers/0/prefill_queries has shape [8, 41, 16]", "n_prefill 41 exceeds prompt_len 40"});
}

// prompt_len and num_decode_steps are each <= 2^30, but their sum (the token count, an int) may not be.
TEST_F(TraceIOBad, TokenCountOverflowingIntIsRejected) {
    set_int("prompt_len", 1LL << 30);
    set_int("num_decode_steps", 1LL << 30);
    expect_open_error({"prompt_len (1073741824) + num_decode_steps (1073741824) exceeds 2147483647 tokens"});
}

// Issue 16 defect 4: a header declaring 2^30 tokens (datasets declared, never written: a small file)
// opens, and reading a head is refused with the slice's size instead of std::bad_alloc.
TEST_F(TraceIOBad, BillionTokenHeaderIsRefusedBeforeReading) {
    const long long tokens = 1LL << 30;
    set_int("prompt_len", tokens - in.num_decode_steps);
    set_int("head_dim", 1024);  // 12 TiB per head: more than any machine has
    modify(path, [&](hid_t f) {
        h5::Hid t = h5::make_f16_type();
        for (int l : {0, 2}) {
            const std::string g = "/layers/" + std::to_string(l) + "/";
            for (const char* name : {"keys", "values"}) replace_dataset(f, (g + name).c_str(), t, {2, (hsize_t)tokens, 1024});
            replace_dataset(f, (g + "queries").c_str(), t, {8, 7, 1024});
            replace_dataset(f, (g + "prefill_queries").c_str(), t, {8, 5, 1024});
            h5::Hid ds(H5Dopen2(f, (g + "prefill_queries").c_str(), H5P_DEFAULT));
            h5::write_attr_int(ds, "first_position", 32);
        }
    });
    ASSERT_LT(fs::file_size(path), 1u << 20);
    TraceReader r(path);
    EXPECT_EQ(r.info().n_tokens(), tokens);
    try {
        r.read_head(0, 0);
        ADD_FAILURE() << "read_head did not refuse a " << tokens << "-token head";
    } catch (const ResourceError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(path + ": reading layer 0 KV head 0 (1073741824 tokens x head_dim 1024) needs about"),
                  std::string::npos) << msg;
        EXPECT_NE(msg.find("limit (available memory"), std::string::npos) << msg;
    }
}

TEST_F(TraceIOBad, ReadHeadOutOfRange) {
    TraceReader r(path);
    expect_trace_error([&] { r.read_head(1, 0); }, {path, "layer 1 is not in the trace", "0, 2"});
    expect_trace_error([&] { r.read_head(0, 2); }, {path, "kv_head 2 out of range [0, 2)"});
    expect_trace_error([&] { r.read_head(0, -1); }, {path, "kv_head -1"});
}

/// Writes one element of `name` at (h, t, i) in the dataset's own type, from `bits`.
void poke(const std::string& path, const char* name, hsize_t h, hsize_t t, hsize_t i, const void* bits) {
    modify(path, [&](hid_t f) {
        h5::Hid ds(H5Dopen2(f, name, H5P_DEFAULT));
        h5::Hid type(H5Dget_type(ds));
        h5::Hid fs(H5Dget_space(ds));
        const hsize_t start[3] = {h, t, i}, count[3] = {1, 1, 1}, one = 1;
        ASSERT_GE(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, nullptr, count, nullptr), 0);
        h5::Hid ms(H5Screate_simple(1, &one, nullptr));
        ASSERT_GE(H5Dwrite(ds, type, ms, fs, H5P_DEFAULT, bits), 0);
    });
}

TEST_F(TraceIOBad, NonFiniteValues) {
    const uint16_t half_nan = 0x7E00, half_ninf = 0xFC00;
    poke(path, "/layers/2/keys", 1, 5, 3, &half_nan);
    {
        TraceReader r(path);  // open checks metadata only
        EXPECT_NO_THROW(r.read_head(2, 0));
        expect_trace_error([&] { r.read_head(2, 1); },
                           {path, "/layers/2/keys", "nan", "(head 1, token 5, dim 3)"});
        ReadOptions ro;
        ro.check_finite = false;
        EXPECT_TRUE(std::isnan(r.read_head(2, 1, ro).key(5)[3]));
    }
    poke(path, "/layers/0/queries", 6, 2, 1, &half_ninf);
    {
        TraceReader r(path);
        expect_trace_error([&] { r.read_head(0, 1); }, {path, "/layers/0/queries", "-inf", "(head 6, step 2, dim 1)"});
        ReadOptions ro;
        ro.max_steps = 2;  // the bad step is not read
        EXPECT_NO_THROW(r.read_head(0, 1, ro));
    }
    poke(path, "/layers/0/prefill_queries", 7, 4, 0, &half_nan);
    {
        TraceReader r(path);
        ReadOptions ro;
        ro.max_steps = 2;
        expect_trace_error([&] { r.read_head(0, 1, ro); },
                           {path, "/layers/0/prefill_queries", "(head 7, token 36, dim 0)"});
        ro.prefill_queries = false;
        EXPECT_NO_THROW(r.read_head(0, 1, ro));
    }
    // float32 and bfloat16 traces too
    for (DType dt : {DType::f32, DType::bf16}) {
        write_trace(path, make_info(dt), 0);
        const float finf = INFINITY;
        const uint16_t bnan = 0x7FC0;
        poke(path, "/layers/0/values", 0, 46, 15, dt == DType::f32 ? (const void*)&finf : (const void*)&bnan);
        TraceReader r(path);
        expect_trace_error([&] { r.read_head(0, 0); },
                           {path, "/layers/0/values", dt == DType::f32 ? "inf" : "nan", "(head 0, token 46, dim 15)"});
    }
}

}  // namespace
