#include "trace/writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
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

/// Converts float32 -> storage bits (float16 / bfloat16), rejecting NaN/Inf inputs and values that
/// overflow the storage type. `dims` is the dataset shape, for the error message.
std::vector<uint16_t> encode16(const std::string& where, const std::vector<float>& x, DType t, const hsize_t* dims,
                               const char* axis1) {
    std::vector<uint16_t> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const float v = x[i];
        const uint16_t h = t == DType::f16 ? float_to_half(v) : float_to_bf16(v);
        const float back = t == DType::f16 ? half_to_float(h) : bf16_to_float(h);
        if (!std::isfinite(back)) {
            const size_t d = i % dims[2], tok = (i / dims[2]) % dims[1], head = i / (dims[2] * dims[1]);
            throw TraceError(where + " value " + std::to_string(v) + " at (head " + std::to_string(head) + ", " +
                             axis1 + " " + std::to_string(tok) + ", dim " + std::to_string(d) + ") " +
                             (std::isfinite(v) ? std::string("overflows ") + dtype_name(t) : "is not finite"));
        }
        out[i] = h;
    }
    return out;
}

void check_finite32(const std::string& where, const std::vector<float>& x, const hsize_t* dims, const char* axis1) {
    for (size_t i = 0; i < x.size(); ++i)
        if (!std::isfinite(x[i])) {
            const size_t d = i % dims[2], tok = (i / dims[2]) % dims[1], head = i / (dims[2] * dims[1]);
            throw TraceError(where + " value " + std::to_string(x[i]) + " at (head " + std::to_string(head) + ", " +
                             axis1 + " " + std::to_string(tok) + ", dim " + std::to_string(d) + ") is not finite");
        }
}

}  // namespace

struct TraceWriter::Impl {
    std::string path, tmp;
    TraceInfo info;
    WriteOptions opt;
    Hid file, layers;  ///< closed under the HDF5 lock only
    std::set<int> written;
    int n_prefill = -1;  ///< -1 until the first layer is written
    int prefill_first = 0;
    bool finished = false;

    /// Creates one chunked 3-D dataset of `dims` and writes `data` (storage bits or float32).
    void write_dataset(hid_t group, const char* name, const hsize_t* dims, const void* data) {
        Hid ftype, mtype;
        switch (info.dtype) {
            case DType::f16:
                ftype = h5::make_f16_type();
                mtype = Hid(H5Tcopy(ftype));  // identical memory type: raw copy, no conversion
                break;
            case DType::bf16:
                ftype = Hid(H5Tcopy(H5T_STD_U16LE));
                mtype = Hid(H5Tcopy(H5T_NATIVE_UINT16));
                break;
            case DType::f32:
                ftype = Hid(H5Tcopy(H5T_IEEE_F32LE));
                mtype = Hid(H5Tcopy(H5T_NATIVE_FLOAT));
                break;
        }
        Hid space(H5Screate_simple(3, dims, nullptr));
        Hid dcpl(H5Pcreate(H5P_DATASET_CREATE));
        const hsize_t chunk[3] = {1, std::min<hsize_t>((hsize_t)opt.chunk_tokens, dims[1]), dims[2]};
        bool ok = ftype.valid() && mtype.valid() && space.valid() && dcpl.valid() && H5Pset_chunk(dcpl, 3, chunk) >= 0;
        if (ok && opt.gzip_level > 0)
            ok = H5Pset_shuffle(dcpl) >= 0 && H5Pset_deflate(dcpl, (unsigned)opt.gzip_level) >= 0;
        if (!ok) throw TraceError(path + ": cannot set up dataset " + name + " " + shape_str(dims));
        Hid ds(H5Dcreate2(group, name, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
        if (!ds.valid()) throw TraceError(tmp + ": cannot create dataset " + name + " " + shape_str(dims));
        if (H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
            throw TraceError(tmp + ": cannot write dataset " + name + " " + shape_str(dims) + " (disk full?)");
        if (info.dtype == DType::bf16) {
            try {
                h5::write_attr_int(ds, "bfloat16", 1);
            } catch (const std::exception& e) {
                throw TraceError(tmp + ": dataset " + name + ": " + e.what());
            }
        }
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
        impl_->layers.reset();
        impl_->file.reset();
    }
    std::remove(impl_->tmp.c_str());
}

void TraceWriter::write_layer(int layer, const std::vector<float>& keys, const std::vector<float>& values,
                              const std::vector<float>& queries, const std::vector<float>& prefill_queries,
                              int n_prefill, int prefill_first_position) {
    Impl& w = *impl_;
    const TraceInfo& in = w.info;
    const std::string where = w.path + ": /layers/" + std::to_string(layer) + "/";
    if (w.finished) throw TraceError(w.path + ": write_layer(" + std::to_string(layer) + ") after finish()");
    if (layer < 0 || layer >= in.num_layers)
        throw TraceError(w.path + ": write_layer: layer " + std::to_string(layer) + " out of range [0, " +
                         std::to_string(in.num_layers) + ") (num_layers)");
    if (w.written.count(layer))
        throw TraceError(w.path + ": write_layer: layer " + std::to_string(layer) + " written twice");

    const hsize_t kv_dims[3] = {(hsize_t)in.num_kv_heads, (hsize_t)in.n_tokens(), (hsize_t)in.head_dim};
    const hsize_t q_dims[3] = {(hsize_t)in.num_q_heads, (hsize_t)in.num_decode_steps, (hsize_t)in.head_dim};
    const hsize_t pf_dims[3] = {(hsize_t)in.num_q_heads, (hsize_t)std::max(n_prefill, 0), (hsize_t)in.head_dim};
    const auto check_size = [&](const char* name, const std::vector<float>& x, const hsize_t* d, const char* axes) {
        const size_t want = d[0] * d[1] * d[2];
        if (x.size() != want)
            throw TraceError(where + name + ": given " + std::to_string(x.size()) + " values, expected " +
                             std::to_string(want) + " = " + shape_str(d) + " (" + axes + ")");
    };
    check_size("keys", keys, kv_dims, "num_kv_heads, prompt_len + num_decode_steps, head_dim");
    check_size("values", values, kv_dims, "num_kv_heads, prompt_len + num_decode_steps, head_dim");
    check_size("queries", queries, q_dims, "num_q_heads, num_decode_steps, head_dim");
    if (n_prefill < 0) throw TraceError(where + "prefill_queries: n_prefill is " + std::to_string(n_prefill));
    if (n_prefill == 0) {
        if (!prefill_queries.empty())
            throw TraceError(where + "prefill_queries: given " + std::to_string(prefill_queries.size()) +
                             " values with n_prefill = 0 (expected none)");
    } else {
        check_size("prefill_queries", prefill_queries, pf_dims, "num_q_heads, n_prefill, head_dim");
        if (prefill_first_position < 0 || prefill_first_position + n_prefill > in.prompt_len)
            throw TraceError(where + "prefill_queries: first_position " + std::to_string(prefill_first_position) +
                             " + n_prefill " + std::to_string(n_prefill) + " must lie in [0, prompt_len = " +
                             std::to_string(in.prompt_len) + "]");
    }
    const int first_pos = n_prefill > 0 ? prefill_first_position : 0;
    if (w.n_prefill >= 0 && (w.n_prefill != n_prefill || w.prefill_first != first_pos))
        throw TraceError(where + "prefill_queries: n_prefill " + std::to_string(n_prefill) + " / first_position " +
                         std::to_string(first_pos) + " differ from the first layer written (" +
                         std::to_string(w.n_prefill) + " / " + std::to_string(w.prefill_first) +
                         "); every layer must have the same");

    // Convert outside the HDF5 lock.
    std::vector<uint16_t> k16, v16, q16, p16;
    const void *kp = keys.data(), *vp = values.data(), *qp = queries.data(), *pp = prefill_queries.data();
    if (in.dtype == DType::f32) {
        check_finite32(where + "keys", keys, kv_dims, "token");
        check_finite32(where + "values", values, kv_dims, "token");
        check_finite32(where + "queries", queries, q_dims, "step");
        if (n_prefill > 0) check_finite32(where + "prefill_queries", prefill_queries, pf_dims, "index");
    } else {
        k16 = encode16(where + "keys", keys, in.dtype, kv_dims, "token");
        v16 = encode16(where + "values", values, in.dtype, kv_dims, "token");
        q16 = encode16(where + "queries", queries, in.dtype, q_dims, "step");
        if (n_prefill > 0) p16 = encode16(where + "prefill_queries", prefill_queries, in.dtype, pf_dims, "index");
        kp = k16.data(), vp = v16.data(), qp = q16.data(), pp = p16.data();
    }

    h5::Lock lk;
    const std::string gname = std::to_string(layer);
    Hid g(H5Gcreate2(w.layers, gname.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!g.valid()) throw TraceError(w.tmp + ": cannot create group /layers/" + gname);
    w.write_dataset(g, "keys", kv_dims, kp);
    w.write_dataset(g, "values", kv_dims, vp);
    w.write_dataset(g, "queries", q_dims, qp);
    if (n_prefill > 0) {
        w.write_dataset(g, "prefill_queries", pf_dims, pp);
        Hid ds(H5Dopen2(g, "prefill_queries", H5P_DEFAULT));
        try {
            h5::write_attr_int(ds, "first_position", prefill_first_position);
        } catch (const std::exception& e) {
            throw TraceError(w.tmp + ": /layers/" + gname + "/prefill_queries: " + e.what());
        }
    }
    w.written.insert(layer);
    w.n_prefill = n_prefill;
    w.prefill_first = first_pos;
}

void TraceWriter::finish() {
    Impl& w = *impl_;
    if (w.finished) throw TraceError(w.path + ": finish() called twice");
    if (w.written.empty()) throw TraceError(w.path + ": finish() with no layer written (write_layer at least once)");
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
