#include "trace/writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string_view>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/temp_files.hpp"
#include "trace/h5util.hpp"

namespace retro {

namespace {

namespace fs = std::filesystem;
using h5::Hid;

std::string shape_str(const hsize_t* d) {
    return "[" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " + std::to_string(d[2]) + "]";
}

/// Checks `info`/`opt` before anything touches the disk. Throws TraceError prefixed with `path`.
void validate_info(const std::string& path, const TraceInfo& info, const WriteOptions& opt) {
    const auto bad = [&](const std::string& msg) { throw TraceError(path + ": invalid trace info: " + msg); };
    const auto positive = [&](const char* name, int v) {
        if (v < 1) bad(std::string(name) + " is " + std::to_string(v) + ", expected >= 1");
    };
    if (info.version != 1) bad("version is " + std::to_string(info.version) + ", this writer writes version 1");
    positive("num_layers", info.num_layers);
    positive("num_q_heads", info.num_q_heads);
    positive("num_kv_heads", info.num_kv_heads);
    positive("head_dim", info.head_dim);
    positive("prompt_len", info.prompt_len);
    positive("num_decode_steps", info.num_decode_steps);
    if (info.num_q_heads % info.num_kv_heads != 0)
        bad("num_q_heads (" + std::to_string(info.num_q_heads) + ") is not a multiple of num_kv_heads (" +
            std::to_string(info.num_kv_heads) + ")");
    if (info.rope_layout != "half_split" && info.rope_layout != "interleaved")
        bad("rope_layout is \"" + info.rope_layout + "\", expected \"half_split\" or \"interleaved\"");
    if (!(std::isfinite(info.rope_theta) && info.rope_theta > 0))
        bad("rope_theta is " + std::to_string(info.rope_theta) + ", expected a finite value > 0");
    if (info.dtype != DType::f16 && info.dtype != DType::bf16 && info.dtype != DType::f32)
        bad("dtype is not float16, bfloat16 or float32");
    for (const auto& [k, v] : info.extra) {
        if (k.empty()) bad("extra attribute with an empty name");
        for (const char* known : h5::kRootAttrs)
            if (k == known) bad("extra attribute '" + k + "' collides with a format attribute");
    }
    if (opt.chunk_tokens < 1)
        bad("WriteOptions::chunk_tokens is " + std::to_string(opt.chunk_tokens) + ", expected >= 1");
    if (opt.gzip_level < 0 || opt.gzip_level > 9)
        bad("WriteOptions::gzip_level is " + std::to_string(opt.gzip_level) + ", expected 0..9");
}

/// "(head H, <axis1> T, dim D)" of element i of a [heads, dims[1], dims[2]] block whose first head is head0.
std::string element_str(size_t i, const hsize_t* dims, const char* axis1, size_t head0) {
    const size_t d = i % dims[2], tok = (i / dims[2]) % dims[1], head = head0 + i / (dims[2] * dims[1]);
    return "(head " + std::to_string(head) + ", " + axis1 + " " + std::to_string(tok) + ", dim " + std::to_string(d) + ")";
}

/// Converts float32 -> storage bits (float16 / bfloat16), rejecting NaN/Inf inputs and values that
/// overflow the storage type. x: [count] = a block of [heads, dims[1], dims[2]] whose first head is head0.
std::vector<uint16_t> encode16(const std::string& where, const float* x, size_t count, DType t, const hsize_t* dims,
                               const char* axis1, size_t head0) {
    std::vector<uint16_t> out(count);
    for (size_t i = 0; i < count; ++i) {
        const float v = x[i];
        const uint16_t h = t == DType::f16 ? float_to_half(v) : float_to_bf16(v);
        const float back = t == DType::f16 ? half_to_float(h) : bf16_to_float(h);
        if (!std::isfinite(back))
            throw TraceError(where + " value " + std::to_string(v) + " at " + element_str(i, dims, axis1, head0) + " " +
                             (std::isfinite(v) ? std::string("overflows ") + dtype_name(t) : "is not finite"));
        out[i] = h;
    }
    return out;
}

void check_finite32(const std::string& where, const float* x, size_t count, const hsize_t* dims, const char* axis1,
                    size_t head0) {
    for (size_t i = 0; i < count; ++i)
        if (!std::isfinite(x[i]))
            throw TraceError(where + " value " + std::to_string(x[i]) + " at " + element_str(i, dims, axis1, head0) +
                             " is not finite");
}

}  // namespace

/// The layer being written: its datasets, created by begin_layer, filled a KV head at a time.
struct OpenLayer {
    int layer = -1;
    Hid keys, values, queries, prefill;  ///< closed under the HDF5 lock only
    std::vector<char> done;              ///< [num_kv_heads] rows written
};

struct TraceWriter::Impl {
    std::string path, tmp;
    TraceInfo info;
    WriteOptions opt;
    Hid file, layers;  ///< closed under the HDF5 lock only
    std::set<int> written;  ///< layers begun (complete once `open` moved on)
    std::unique_ptr<OpenLayer> open;
    int n_prefill = -1;  ///< -1 until the first layer is begun
    int prefill_first = 0;
    bool finished = false;

    /// File and memory types of the storage dtype (memory = file bits for 16-bit types: a raw copy).
    std::pair<Hid, Hid> types() const {
        switch (info.dtype) {
            case DType::f16: {
                Hid f = h5::make_f16_type();
                Hid m(H5Tcopy(f));
                return {std::move(f), std::move(m)};
            }
            case DType::bf16:
                return {Hid(H5Tcopy(H5T_STD_U16LE)), Hid(H5Tcopy(H5T_NATIVE_UINT16))};
            case DType::f32:
                break;
        }
        return {Hid(H5Tcopy(H5T_IEEE_F32LE)), Hid(H5Tcopy(H5T_NATIVE_FLOAT))};
    }

    /// Creates one chunked 3-D dataset of `dims` (chunk [1, chunk_tokens, d]: one head's rows per chunk).
    Hid create_dataset(hid_t group, const char* name, const hsize_t* dims) {
        auto [ftype, mtype] = types();
        Hid space(H5Screate_simple(3, dims, nullptr));
        Hid dcpl(H5Pcreate(H5P_DATASET_CREATE));
        const hsize_t chunk[3] = {1, std::max<hsize_t>(1, std::min<hsize_t>((hsize_t)opt.chunk_tokens, dims[1])), dims[2]};
        bool ok = ftype.valid() && space.valid() && dcpl.valid() && H5Pset_chunk(dcpl, 3, chunk) >= 0;
        if (ok && opt.gzip_level > 0)
            ok = H5Pset_shuffle(dcpl) >= 0 && H5Pset_deflate(dcpl, (unsigned)opt.gzip_level) >= 0;
        if (!ok) throw TraceError(path + ": cannot set up dataset " + name + " " + shape_str(dims));
        Hid ds(H5Dcreate2(group, name, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
        if (!ds.valid()) throw TraceError(tmp + ": cannot create dataset " + name + " " + shape_str(dims));
        if (info.dtype == DType::bf16) {
            try {
                h5::write_attr_int(ds, "bfloat16", 1);
            } catch (const std::exception& e) {
                throw TraceError(tmp + ": dataset " + name + ": " + e.what());
            }
        }
        return ds;
    }

    /// Writes rows [first, first + count) along axis 0 of `ds` (dims) from `data` (storage bits or float32).
    void write_rows(hid_t ds, const char* name, const hsize_t* dims, hsize_t first, hsize_t count, const void* data) {
        if (count == 0 || dims[1] == 0) return;
        auto [ftype, mtype] = types();
        const hsize_t start[3] = {first, 0, 0}, block[3] = {count, dims[1], dims[2]};
        Hid fspace(H5Dget_space(ds));
        Hid mspace(H5Screate_simple(3, block, nullptr));
        if (!mtype.valid() || !fspace.valid() || !mspace.valid() ||
            H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, block, nullptr) < 0 ||
            H5Dwrite(ds, mtype, mspace, fspace, H5P_DEFAULT, data) < 0)
            throw TraceError(tmp + ": cannot write rows " + std::to_string(first) + ".." + std::to_string(first + count) +
                             " of dataset " + name + " " + shape_str(dims) + " (disk full?)");
    }

    hsize_t n_tokens() const { return (hsize_t)info.n_tokens(); }
    int group() const { return info.num_q_heads / info.num_kv_heads; }

    /// A layer's dataset shapes: keys/values [num_kv_heads, n_tokens, d], queries [num_q_heads, steps, d],
    /// prefill_queries [num_q_heads, n_pf, d].
    struct Shapes {
        hsize_t kv[3], q[3], pf[3];
    };
    Shapes shapes(int n_pf) const {
        const hsize_t d = (hsize_t)info.head_dim, H = (hsize_t)info.num_q_heads;
        return {{(hsize_t)info.num_kv_heads, n_tokens(), d}, {H, (hsize_t)info.num_decode_steps, d}, {H, (hsize_t)n_pf, d}};
    }

    /// KV head g's arrays in storage bits (empty for float32, which is written in place).
    struct Encoded {
        std::vector<uint16_t> keys, values, queries, prefill;
    };

    /// Checks KV head g's arrays of `layer` (non-finite values, float16/bfloat16 overflow: TraceError naming
    /// the dataset and the element) and converts them to the storage type: keys, values [n_tokens, d];
    /// queries [group, steps, d]; prefill [group, n_prefill, d] (sizes checked by the caller).
    Encoded encode_head(int layer, int n_pf, int g, const float* keys, const float* values, const float* queries,
                        const float* prefill) const {
        const std::string where = path + ": /layers/" + std::to_string(layer) + "/";
        const hsize_t d = (hsize_t)info.head_dim, grp = (hsize_t)group();
        const Shapes sh = shapes(n_pf);
        const hsize_t *kv_dims = sh.kv, *q_dims = sh.q, *pf_dims = sh.pf;
        const size_t kv_n = n_tokens() * d, q_n = grp * q_dims[1] * d, pf_n = grp * pf_dims[1] * d;
        const size_t q0 = (size_t)g * grp;
        Encoded e;
        if (info.dtype == DType::f32) {
            check_finite32(where + "keys", keys, kv_n, kv_dims, "token", (size_t)g);
            check_finite32(where + "values", values, kv_n, kv_dims, "token", (size_t)g);
            check_finite32(where + "queries", queries, q_n, q_dims, "step", q0);
            check_finite32(where + "prefill_queries", prefill, pf_n, pf_dims, "index", q0);
        } else {
            e.keys = encode16(where + "keys", keys, kv_n, info.dtype, kv_dims, "token", (size_t)g);
            e.values = encode16(where + "values", values, kv_n, info.dtype, kv_dims, "token", (size_t)g);
            e.queries = encode16(where + "queries", queries, q_n, info.dtype, q_dims, "step", q0);
            e.prefill = encode16(where + "prefill_queries", prefill, pf_n, info.dtype, pf_dims, "index", q0);
        }
        return e;
    }

    /// Writes KV head g's rows of the open layer: its float32 arrays as encode_head's, or for 16-bit
    /// storage their encoding `e` (encode_head's result).
    void store_head(int g, const float* keys, const float* values, const float* queries, const float* prefill,
                    const Encoded& e) {
        OpenLayer& L = *open;
        const bool raw = info.dtype == DType::f32;
        const hsize_t grp = (hsize_t)group();
        const Shapes sh = shapes(n_prefill);
        h5::Lock lk;
        write_rows(L.keys, "keys", sh.kv, (hsize_t)g, 1, raw ? (const void*)keys : e.keys.data());
        write_rows(L.values, "values", sh.kv, (hsize_t)g, 1, raw ? (const void*)values : e.values.data());
        write_rows(L.queries, "queries", sh.q, (hsize_t)g * grp, grp, raw ? (const void*)queries : e.queries.data());
        if (n_prefill > 0)
            write_rows(L.prefill, "prefill_queries", sh.pf, (hsize_t)g * grp, grp,
                       raw ? (const void*)prefill : e.prefill.data());
        L.done[(size_t)g] = 1;
    }

    /// The checks begin_layer makes before touching the file (range, duplicates, prefill positions).
    void check_layer(int layer, int n_prefill, int prefill_first_position) const;

    /// Throws unless the open layer (if any) has every KV head written; then closes its datasets.
    void close_layer(const char* before) {
        if (!open) return;
        std::string missing;
        for (size_t g = 0; g < open->done.size(); ++g)
            if (!open->done[g]) missing += (missing.empty() ? "" : ", ") + std::to_string(g);
        if (!missing.empty()) {
            throw TraceError(path + ": " + before + " with layer " + std::to_string(open->layer) + " incomplete: KV head(s) " +
                             missing + " of " + std::to_string(info.num_kv_heads) + " not written");
        }
        h5::Lock lk;
        open.reset();
    }
};

TraceWriter::TraceWriter(const std::string& path, const TraceInfo& info, const WriteOptions& opt) {
    validate_info(path, info, opt);
    const fs::path parent = fs::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty() && !fs::is_directory(parent, ec))
        throw TraceError(path + ": directory " + parent.string() + " does not exist");
    if (fs::is_directory(path, ec)) throw TraceError(path + ": is a directory");

    auto impl = std::make_unique<Impl>();
    impl->path = path;
    // A killed writer (synth SIGKILLed, OOM) leaves its temp file behind: remove those whose owner is
    // gone, never another live writer's (core/temp_files.hpp).
    remove_orphan_temps_of(path);
    impl->tmp = temp_path_for(path);
    impl->info = info;
    impl->info.path.clear();
    impl->info.layers.clear();
    impl->info.num_prefill_queries = 0;
    impl->info.prefill_first_position = 0;
    impl->opt = opt;

    h5::Lock lk;
    Hid fapl(H5Pcreate(H5P_FILE_ACCESS));
    H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
    Hid file(H5Fcreate(impl->tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
    if (!file.valid()) throw TraceError(path + ": cannot create temporary file " + impl->tmp);
    try {
        const TraceInfo& in = impl->info;
        h5::write_attr_string(file, "format", "retro-trace");
        h5::write_attr_int(file, "version", 1);
        h5::write_attr_string(file, "model", in.model);
        h5::write_attr_int(file, "num_layers", in.num_layers);
        h5::write_attr_int(file, "num_q_heads", in.num_q_heads);
        h5::write_attr_int(file, "num_kv_heads", in.num_kv_heads);
        h5::write_attr_int(file, "head_dim", in.head_dim);
        h5::write_attr_int(file, "prompt_len", in.prompt_len);
        h5::write_attr_int(file, "num_decode_steps", in.num_decode_steps);
        h5::write_attr_int(file, "rope_applied", in.rope_applied ? 1 : 0);
        h5::write_attr_string(file, "rope_layout", in.rope_layout);
        h5::write_attr_double(file, "rope_theta", in.rope_theta);
        h5::write_attr_string(file, "source", in.source);
        h5::write_attr_string(file, "dtype", dtype_name(in.dtype));
        for (const auto& [k, v] : in.extra) h5::write_attr_string(file, k.c_str(), v);
        Hid layers(H5Gcreate2(file, "layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        if (!layers.valid()) throw std::runtime_error("cannot create group /layers");
        impl->layers = std::move(layers);
    } catch (const std::exception& e) {
        impl->layers.reset();
        file.reset();
        std::remove(impl->tmp.c_str());
        throw TraceError(path + ": cannot write " + impl->tmp + ": " + e.what());
    }
    impl->file = std::move(file);
    impl_ = std::move(impl);
}

TraceWriter::~TraceWriter() {
    if (!impl_ || impl_->finished) return;
    {
        h5::Lock lk;
        impl_->open.reset();
        impl_->layers.reset();
        impl_->file.reset();
    }
    std::remove(impl_->tmp.c_str());
}

void TraceWriter::Impl::check_layer(int layer, int n_prefill_, int prefill_first_position) const {
    const TraceInfo& in = info;
    const std::string where = path + ": /layers/" + std::to_string(layer) + "/";
    if (finished) throw TraceError(path + ": write_layer(" + std::to_string(layer) + ") after finish()");
    if (layer < 0 || layer >= in.num_layers)
        throw TraceError(path + ": write_layer: layer " + std::to_string(layer) + " out of range [0, " +
                         std::to_string(in.num_layers) + ") (num_layers)");
    if (written.count(layer))
        throw TraceError(path + ": write_layer: layer " + std::to_string(layer) + " written twice");
    if (n_prefill_ < 0) throw TraceError(where + "prefill_queries: n_prefill is " + std::to_string(n_prefill_));
    if (n_prefill_ > 0 && (prefill_first_position < 0 || prefill_first_position + n_prefill_ > in.prompt_len))
        throw TraceError(where + "prefill_queries: first_position " + std::to_string(prefill_first_position) +
                         " + n_prefill " + std::to_string(n_prefill_) + " must lie in [0, prompt_len = " +
                         std::to_string(in.prompt_len) + "]");
    const int first_pos = n_prefill_ > 0 ? prefill_first_position : 0;
    if (n_prefill >= 0 && (n_prefill != n_prefill_ || prefill_first != first_pos))
        throw TraceError(where + "prefill_queries: n_prefill " + std::to_string(n_prefill_) + " / first_position " +
                         std::to_string(first_pos) + " differ from the first layer written (" +
                         std::to_string(n_prefill) + " / " + std::to_string(prefill_first) +
                         "); every layer must have the same");
}

void TraceWriter::begin_layer(int layer, int n_prefill, int prefill_first_position) {
    Impl& w = *impl_;
    const TraceInfo& in = w.info;
    w.close_layer(("begin_layer(" + std::to_string(layer) + ")").c_str());
    w.check_layer(layer, n_prefill, prefill_first_position);
    const int first_pos = n_prefill > 0 ? prefill_first_position : 0;
    const Impl::Shapes sh = w.shapes(n_prefill);
    auto L = std::make_unique<OpenLayer>();
    L->layer = layer;
    L->done.assign((size_t)in.num_kv_heads, 0);
    h5::Lock lk;
    const std::string gname = std::to_string(layer);
    Hid g(H5Gcreate2(w.layers, gname.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!g.valid()) throw TraceError(w.tmp + ": cannot create group /layers/" + gname);
    L->keys = w.create_dataset(g, "keys", sh.kv);
    L->values = w.create_dataset(g, "values", sh.kv);
    L->queries = w.create_dataset(g, "queries", sh.q);
    if (n_prefill > 0) {
        L->prefill = w.create_dataset(g, "prefill_queries", sh.pf);
        try {
            h5::write_attr_int(L->prefill, "first_position", prefill_first_position);
        } catch (const std::exception& e) {
            throw TraceError(w.tmp + ": /layers/" + gname + "/prefill_queries: " + e.what());
        }
    }
    w.open = std::move(L);
    w.written.insert(layer);
    w.n_prefill = n_prefill;
    w.prefill_first = first_pos;
}

namespace {

void check_size(const std::string& where, const char* name, size_t given, size_t want, const std::string& shape,
                const char* axes) {
    if (given != want)
        throw TraceError(where + name + ": given " + std::to_string(given) + " values, expected " +
                         std::to_string(want) + " = " + shape + " (" + axes + ")");
}

std::string shape3(size_t a, size_t b, size_t c) {
    return "[" + std::to_string(a) + ", " + std::to_string(b) + ", " + std::to_string(c) + "]";
}

}  // namespace

void TraceWriter::write_kv_head(int layer, int kv_head, const std::vector<float>& keys,
                                const std::vector<float>& values, const std::vector<float>& queries,
                                const std::vector<float>& prefill_queries) {
    Impl& w = *impl_;
    const TraceInfo& in = w.info;
    const std::string where = w.path + ": /layers/" + std::to_string(layer) + "/ KV head " + std::to_string(kv_head) + ": ";
    if (!w.open || w.open->layer != layer)
        throw TraceError(where + "write_kv_head without begin_layer(" + std::to_string(layer) + ")");
    if (kv_head < 0 || kv_head >= in.num_kv_heads)
        throw TraceError(where + "out of range [0, " + std::to_string(in.num_kv_heads) + ") (num_kv_heads)");
    if (w.open->done[(size_t)kv_head]) throw TraceError(where + "written twice");
    const size_t n = (size_t)in.n_tokens(), d = (size_t)in.head_dim, grp = (size_t)w.group();
    check_size(where, "keys", keys.size(), n * d, shape3(1, n, d), "one head, prompt_len + num_decode_steps, head_dim");
    check_size(where, "values", values.size(), n * d, shape3(1, n, d), "one head, prompt_len + num_decode_steps, head_dim");
    check_size(where, "queries", queries.size(), grp * in.num_decode_steps * d, shape3(grp, in.num_decode_steps, d),
               "group, num_decode_steps, head_dim");
    check_size(where, "prefill_queries", prefill_queries.size(), grp * (size_t)w.n_prefill * d,
               shape3(grp, w.n_prefill, d), "group, n_prefill, head_dim");
    const Impl::Encoded e = w.encode_head(layer, w.n_prefill, kv_head, keys.data(), values.data(), queries.data(),
                                          prefill_queries.data());  // outside the HDF5 lock
    w.store_head(kv_head, keys.data(), values.data(), queries.data(), prefill_queries.data(), e);
}

void TraceWriter::write_layer(int layer, const std::vector<float>& keys, const std::vector<float>& values,
                              const std::vector<float>& queries, const std::vector<float>& prefill_queries,
                              int n_prefill, int prefill_first_position) {
    Impl& w = *impl_;
    const TraceInfo& in = w.info;
    const std::string where = w.path + ": /layers/" + std::to_string(layer) + "/";
    const size_t G = (size_t)in.num_kv_heads, H = (size_t)in.num_q_heads, n = (size_t)in.n_tokens(),
                 d = (size_t)in.head_dim, steps = (size_t)in.num_decode_steps, grp = (size_t)w.group();
    check_size(where, "keys", keys.size(), G * n * d, shape3(G, n, d), "num_kv_heads, prompt_len + num_decode_steps, head_dim");
    check_size(where, "values", values.size(), G * n * d, shape3(G, n, d),
               "num_kv_heads, prompt_len + num_decode_steps, head_dim");
    check_size(where, "queries", queries.size(), H * steps * d, shape3(H, steps, d), "num_q_heads, num_decode_steps, head_dim");
    if (n_prefill == 0 && !prefill_queries.empty())
        throw TraceError(where + "prefill_queries: given " + std::to_string(prefill_queries.size()) +
                         " values with n_prefill = 0 (expected none)");
    if (n_prefill > 0)
        check_size(where, "prefill_queries", prefill_queries.size(), H * (size_t)n_prefill * d,
                   shape3(H, (size_t)n_prefill, d), "num_q_heads, n_prefill, head_dim");
    // Every check before the file is touched: a refused layer leaves the writer as it was. The heads are
    // checked and encoded once, here; the encodings are what is written.
    w.close_layer("write_layer");
    w.check_layer(layer, n_prefill, prefill_first_position);
    const size_t pf = (size_t)std::max(n_prefill, 0);
    const auto rows = [&](size_t g) {
        return std::array<const float*, 4>{keys.data() + g * n * d, values.data() + g * n * d,
                                           queries.data() + g * grp * steps * d, prefill_queries.data() + g * grp * pf * d};
    };
    std::vector<Impl::Encoded> enc;
    enc.reserve(G);
    for (size_t g = 0; g < G; ++g) {
        const auto r = rows(g);
        enc.push_back(w.encode_head(layer, n_prefill, (int)g, r[0], r[1], r[2], r[3]));
    }
    begin_layer(layer, n_prefill, prefill_first_position);
    for (size_t g = 0; g < G; ++g) {
        const auto r = rows(g);
        w.store_head((int)g, r[0], r[1], r[2], r[3], enc[g]);
    }
    w.close_layer("write_layer");
}

void TraceWriter::finish() {
    Impl& w = *impl_;
    if (w.finished) throw TraceError(w.path + ": finish() called twice");
    if (w.written.empty()) throw TraceError(w.path + ": finish() with no layer written (write_layer at least once)");
    w.close_layer("finish()");
    {
        h5::Lock lk;
        w.layers.reset();
        if (H5Fflush(w.file, H5F_SCOPE_GLOBAL) < 0) throw TraceError(w.tmp + ": cannot flush (disk full?)");
        // Give up ownership first so a failed close is not retried by the destructor.
        if (H5Fclose(w.file.release()) < 0) throw TraceError(w.tmp + ": cannot close (disk full?)");
    }
    const int fd = ::open(w.tmp.c_str(), O_RDONLY);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
    std::error_code ec;
    fs::rename(w.tmp, w.path, ec);
    if (ec) throw TraceError(w.path + ": cannot rename " + w.tmp + " into place: " + ec.message());
    w.finished = true;
}

}  // namespace retro
