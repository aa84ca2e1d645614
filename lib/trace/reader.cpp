#include "trace/reader.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/memory.hpp"
#include "trace/h5util.hpp"
#include "trace/memory_estimates.hpp"
#include "trace/metadata_watch.hpp"

namespace retro {

namespace {

using h5::Hid;

std::string shape_str(const std::vector<hsize_t>& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
}

/// "float (2 bytes)", "unsigned integer (2 bytes)", ... for error messages.
std::string describe_type(hid_t t) {
    const size_t sz = H5Tget_size(t);
    const std::string bytes = " (" + std::to_string(sz) + " bytes)";
    switch (H5Tget_class(t)) {
        case H5T_FLOAT: return (sz == 2 ? "float16" : sz == 4 ? "float32" : sz == 8 ? "float64" : "float") + bytes;
        case H5T_INTEGER:
            return std::string(H5Tget_sign(t) == H5T_SGN_NONE ? "unsigned " : "signed ") + "integer" + bytes;
        case H5T_STRING: return "string";
        case H5T_COMPOUND: return "compound";
        case H5T_ENUM: return "enum";
        case H5T_ARRAY: return "array";
        default: return "unsupported class" + bytes;
    }
}

bool is_ieee_half(hid_t t) {
    if (H5Tget_class(t) != H5T_FLOAT || H5Tget_size(t) != 2) return false;
    size_t spos, epos, esize, mpos, msize;
    if (H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) < 0) return false;
    return spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 && H5Tget_ebias(t) == 15;
}

/// Raw data of one hyperslab read under the lock, decoded outside it.
struct Raw {
    std::vector<uint16_t> u16;  ///< float16 / bfloat16 bits
    std::vector<float> f32;     ///< float32 data (HDF5 converts byte order itself)
    bool swap = false;          ///< 16-bit data stored big-endian: swap bytes after the raw read
};

/// 16-bit storage bits -> float32 with lib/core/half.hpp (never HDF5's soft conversion).
void decode16(const Raw& r, DType t, std::vector<float>& out) {
    out.resize(r.u16.size());
    const uint16_t* src = r.u16.data();
    float* dst = out.data();
    const size_t n = r.u16.size();
    if (r.swap) {
        for (size_t i = 0; i < n; ++i) {
            const uint16_t b = (uint16_t)((src[i] >> 8) | (src[i] << 8));
            dst[i] = t == DType::f16 ? half_to_float(b) : bf16_to_float(b);
        }
    } else if (t == DType::f16) {
        for (size_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
    } else {
        for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
    }
}

}  // namespace

struct TraceReader::Impl {
    Hid file;  ///< closed under the HDF5 lock only

    /// Reads the hyperslab [start, start + count) of /layers/<layer>/<name> into `out` (lock held).
    void read(const std::string& path, int layer, const char* name, DType t, const hsize_t* start,
              const hsize_t* count, Raw& out) const {
        const size_t total = (size_t)(count[0] * count[1] * count[2]);
        const std::string ds_name = "/layers/" + std::to_string(layer) + "/" + name;
        if (t == DType::f32) out.f32.resize(total);
        else out.u16.resize(total);
        if (total == 0) return;
        const auto fail = [&](const char* what) {
            throw TraceError(path + ": " + ds_name + ": " + what + " (truncated or corrupt file?)");
        };
        Hid ds(H5Dopen2(file, ds_name.c_str(), H5P_DEFAULT));
        if (!ds.valid()) fail("cannot open dataset");
        Hid fspace(H5Dget_space(ds));
        if (!fspace.valid() || H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, count, nullptr) < 0)
            fail("cannot select hyperslab");
        // Memory space of the selection's own shape: HDF5 then copies whole chunk rows (a 1-D memory space
        // of the same size takes its general, ~50x slower, span-matching path).
        Hid mspace(H5Screate_simple(3, count, nullptr));
        Hid mtype;
        void* buf;
        if (t == DType::f32) {
            mtype = Hid(H5Tcopy(H5T_NATIVE_FLOAT));
            buf = out.f32.data();
        } else {
            // Memory type = the file type itself: HDF5 copies the bits without (slow soft) conversion.
            mtype = Hid(H5Dget_type(ds));
            if (mtype.valid()) out.swap = H5Tget_order(mtype) == H5T_ORDER_BE;
            buf = out.u16.data();
        }
        if (!mspace.valid() || !mtype.valid() || H5Dread(ds, mtype, mspace, fspace, H5P_DEFAULT, buf) < 0)
            fail("read failed");
    }
};

TraceReader::TraceReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
    info_.path = path;
    const auto err = [&](const std::string& msg) { throw TraceError(path + ": " + msg); };
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) throw TraceError("trace file not found: " + path);
    if (S_ISDIR(st.st_mode)) err("is a directory, not a trace file");
    if (::access(path.c_str(), R_OK) != 0) err(std::string("cannot read file: ") + std::strerror(errno));

    h5::Lock lk;
    // From here on, every HDF5 call reads metadata; a program's watchdog may end a read that never returns.
    const MetadataReadScope watched(path);
    if (H5Fis_hdf5(path.c_str()) <= 0) err("not a readable HDF5 file (truncated or corrupt?)");
    Hid fapl(H5Pcreate(H5P_FILE_ACCESS));
#if H5_VERSION_GE(1, 10, 7)
    // Keep HDF5's file lock, but do not fail on file systems without lock support (some NFS mounts).
    H5Pset_file_locking(fapl, true, true);
#endif
    Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl));
    if (!file.valid()) err("not a readable HDF5 file (truncated or corrupt?)");

    // ---- root attributes ----
    const auto attr = [&](const char* name) -> std::optional<h5::AttrValue> {
        try {
            return h5::read_attr(file, name);
        } catch (const std::exception& e) {
            err(std::string("root attribute: ") + e.what() + " (truncated or corrupt file?)");
        }
        return std::nullopt;
    };
    const auto req_string = [&](const char* name, const char* expect) {
        const auto v = attr(name);
        if (!v) err(std::string("missing root attribute '") + name + "' (expected " + expect + ")");
        if (v->kind != h5::AttrValue::String)
            err(std::string("root attribute '") + name + "' is " + (v->kind == h5::AttrValue::Other ? "of an " : "a ") +
                v->kind_name() + ", expected a string (" + expect + ")");
        return v->s;
    };
    const auto req_int = [&](const char* name, long long lo, long long hi, const char* expect) {
        const auto v = attr(name);
        if (!v) err(std::string("missing root attribute '") + name + "' (expected " + expect + ")");
        if (v->kind != h5::AttrValue::Int || v->npoints != 1)
            err(std::string("root attribute '") + name + "' is " + (v->npoints != 1 ? "an array" : v->kind_name()) +
                " " + v->to_string() + ", expected a scalar integer (" + expect + ")");
        if (v->i < lo || v->i > hi)
            err(std::string("root attribute '") + name + "' is " + std::to_string(v->i) + ", expected " + expect);
        return (int)v->i;
    };

    const auto format = attr("format");
    if (!format)
        err("missing root attribute 'format' (expected \"retro-trace\"): not a retro-bench trace");
    if (format->kind != h5::AttrValue::String || format->s != "retro-trace")
        err("root attribute 'format' is \"" + format->to_string() + "\", expected \"retro-trace\"");
    info_.version = req_int("version", 1, 1, "1 (this build reads trace format v1)");
    constexpr long long kMax = 1LL << 30;
    info_.num_layers = req_int("num_layers", 1, kMax, "an integer >= 1");
    info_.num_q_heads = req_int("num_q_heads", 1, kMax, "an integer >= 1");
    info_.num_kv_heads = req_int("num_kv_heads", 1, kMax, "an integer >= 1");
    info_.head_dim = req_int("head_dim", 1, kMax, "an integer >= 1");
    info_.prompt_len = req_int("prompt_len", 1, kMax, "an integer >= 1");
    info_.num_decode_steps = req_int("num_decode_steps", 1, kMax, "an integer >= 1");
    info_.rope_applied = req_int("rope_applied", 0, 1, "0 or 1") != 0;
    info_.rope_layout = req_string("rope_layout", "\"half_split\" or \"interleaved\"");
    if (info_.rope_layout != "half_split" && info_.rope_layout != "interleaved")
        err("root attribute 'rope_layout' is \"" + info_.rope_layout +
            "\", expected \"half_split\" or \"interleaved\"");
    {
        const auto v = attr("rope_theta");
        if (!v) err("missing root attribute 'rope_theta' (expected a number > 0)");
        if (v->kind != h5::AttrValue::Float && v->kind != h5::AttrValue::Int)
            err(std::string("root attribute 'rope_theta' is a ") + v->kind_name() + ", expected a number > 0");
        info_.rope_theta = v->kind == h5::AttrValue::Float ? v->f : (double)v->i;
        if (!(std::isfinite(info_.rope_theta) && info_.rope_theta > 0))
            err("root attribute 'rope_theta' is " + v->to_string() + ", expected a number > 0");
    }
    {
        const std::string d = req_string("dtype", "\"float16\", \"bfloat16\" or \"float32\"");
        if (d == "float16") info_.dtype = DType::f16;
        else if (d == "bfloat16") info_.dtype = DType::bf16;
        else if (d == "float32") info_.dtype = DType::f32;
        else err("root attribute 'dtype' is \"" + d + "\", expected \"float16\", \"bfloat16\" or \"float32\"");
    }
    if (const auto v = attr("model")) info_.model = v->to_string();
    if (const auto v = attr("source")) info_.source = v->to_string();
    // Token positions are ints: prompt_len + num_decode_steps (each <= 2^30) must stay one.
    if ((long long)info_.prompt_len + info_.num_decode_steps > std::numeric_limits<int>::max())
        err("prompt_len (" + std::to_string(info_.prompt_len) + ") + num_decode_steps (" +
            std::to_string(info_.num_decode_steps) + ") exceeds " +
            std::to_string(std::numeric_limits<int>::max()) + " tokens (root attributes)");
    if (info_.num_q_heads % info_.num_kv_heads != 0)
        err("num_q_heads (" + std::to_string(info_.num_q_heads) + ") is not a multiple of num_kv_heads (" +
            std::to_string(info_.num_kv_heads) + ") (root attributes; GQA groups must be whole)");
    try {
        for (const auto& name : h5::attr_names(file)) {
            if (std::find_if(std::begin(h5::kRootAttrs), std::end(h5::kRootAttrs),
                             [&](const char* k) { return name == k; }) != std::end(h5::kRootAttrs))
                continue;
            const auto v = h5::read_attr(file, name.c_str());
            if (v && v->kind != h5::AttrValue::Other) info_.extra[name] = v->to_string();
        }
    } catch (const std::exception& e) {
        err(std::string("root attributes: ") + e.what() + " (truncated or corrupt file?)");
    }

    // ---- layer groups ----
    if (!h5::link_exists(file, "layers"))
        err("missing group /layers (expected /layers/<l>/ holding keys, values, queries)");
    Hid layers(H5Gopen2(file, "layers", H5P_DEFAULT));
    if (!layers.valid()) err("/layers is not a group (expected /layers/<l>/ holding keys, values, queries)");
    std::vector<std::string> names;
    {
        auto cb = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
            static_cast<std::vector<std::string>*>(data)->push_back(name);
            return 0;
        };
        hsize_t idx = 0;
        if (H5Literate(layers, H5_INDEX_NAME, H5_ITER_INC, &idx, cb, &names) < 0)
            err("cannot list /layers (truncated or corrupt file?)");
    }
    if (names.empty()) err("/layers has no layer groups (expected /layers/<l>/ for at least one layer)");
    for (const auto& n : names) {
        const bool digits = !n.empty() && n.size() <= 9 &&
                            std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (!digits || (n.size() > 1 && n[0] == '0'))
            err("/layers/" + n + ": layer group names must be layer indices 0 .. num_layers-1 (" +
                std::to_string(info_.num_layers - 1) + ")");
        const int l = std::stoi(n);
        if (l >= info_.num_layers)
            err("/layers/" + n + ": layer index " + n + " >= num_layers (" + std::to_string(info_.num_layers) + ")");
        info_.layers.push_back(l);
    }
    std::sort(info_.layers.begin(), info_.layers.end());

    const DType dt = info_.dtype;
    const std::string kv_axes = "num_kv_heads, prompt_len + num_decode_steps, head_dim";
    const std::string q_axes = "num_q_heads, num_decode_steps, head_dim";
    const std::vector<hsize_t> kv_shape = {(hsize_t)info_.num_kv_heads, (hsize_t)info_.n_tokens(),
                                           (hsize_t)info_.head_dim};
    const std::vector<hsize_t> q_shape = {(hsize_t)info_.num_q_heads, (hsize_t)info_.num_decode_steps,
                                          (hsize_t)info_.head_dim};
    // Opens /layers/<l>/<name>, checks its type against dtype and returns its shape (rank checked).
    const auto check_ds = [&](hid_t group, const std::string& gname, const char* name,
                              const std::vector<hsize_t>* want, const std::string& axes) -> std::vector<hsize_t> {
        const std::string dn = gname + "/" + name;
        const std::string expect = want ? shape_str(*want) + " (" + axes + ")" : "[" + axes + "]";
        if (!h5::link_exists(group, name)) err(dn + " is missing (expected dataset " + expect + ")");
        Hid ds(H5Dopen2(group, name, H5P_DEFAULT));
        if (!ds.valid()) err(dn + " is not a readable dataset (expected dataset " + expect + ")");
        Hid space(H5Dget_space(ds));
        if (!space.valid()) err(dn + ": cannot read its dataspace (truncated or corrupt file?)");
        const int rank = H5Sget_simple_extent_ndims(space);
        if (rank != 3)
            err(dn + " has rank " + std::to_string(rank) + ", expected 3: " + expect);
        std::vector<hsize_t> dims(3);
        H5Sget_simple_extent_dims(space, dims.data(), nullptr);
        if (want && dims != *want)
            err(dn + " has shape " + shape_str(dims) + ", expected " + shape_str(*want) + " (" + axes + ")");
        Hid t(H5Dget_type(ds));
        if (!t.valid()) err(dn + ": cannot read its datatype (truncated or corrupt file?)");
        const std::string dts = std::string("root attribute dtype = ") + dtype_name(dt);
        const H5T_class_t cls = H5Tget_class(t);
        if (cls != H5T_FLOAT && cls != H5T_INTEGER)
            err(dn + " has HDF5 type " + describe_type(t) + ": unsupported dtype class (expected " + dtype_name(dt) +
                ", " + dts + ")");
        bool ok = false;
        switch (dt) {
            case DType::f16: ok = is_ieee_half(t); break;
            case DType::bf16: ok = cls == H5T_INTEGER && H5Tget_size(t) == 2; break;
            case DType::f32: ok = cls == H5T_FLOAT && H5Tget_size(t) == 4; break;
        }
        if (!ok) {
            const char* want_t = dt == DType::f16    ? "IEEE float16"
                                 : dt == DType::bf16 ? "16-bit integer holding bfloat16 bits"
                                                     : "float32";
            err(dn + " has HDF5 type " + describe_type(t) + ", expected " + want_t + " (" + dts + ")");
        }
        if (dt == DType::bf16) {
            std::optional<h5::AttrValue> b;
            try {
                b = h5::read_attr(ds, "bfloat16");
            } catch (const std::exception& e) {
                err(dn + ": " + e.what());
            }
            if (b && !(b->kind == h5::AttrValue::Int && b->i == 1))
                err(dn + " attribute 'bfloat16' is " + b->to_string() + ", expected 1 (" + dts + ")");
        }
        return dims;
    };

    bool first_layer = true;
    int ref_layer = -1;
    for (int l : info_.layers) {
        const std::string gname = "/layers/" + std::to_string(l);
        Hid g(H5Gopen2(layers, std::to_string(l).c_str(), H5P_DEFAULT));
        if (!g.valid()) err(gname + " is not a group (expected keys, values, queries datasets)");
        check_ds(g, gname, "keys", &kv_shape, kv_axes);
        check_ds(g, gname, "values", &kv_shape, kv_axes);
        check_ds(g, gname, "queries", &q_shape, q_axes);
        const bool has_pf = h5::link_exists(g, "prefill_queries");
        int n_pf = 0, first = 0;
        if (has_pf) {
            const auto dims = check_ds(g, gname, "prefill_queries", nullptr, "num_q_heads, n_prefill, head_dim");
            const std::string dn = gname + "/prefill_queries";
            if (dims[0] != (hsize_t)info_.num_q_heads || dims[2] != (hsize_t)info_.head_dim || dims[1] < 1)
                err(dn + " has shape " + shape_str(dims) + ", expected [" + std::to_string(info_.num_q_heads) +
                    ", n_prefill >= 1, " + std::to_string(info_.head_dim) + "] (num_q_heads, n_prefill, head_dim)");
            if (dims[1] > (hsize_t)info_.prompt_len)
                err(dn + " has shape " + shape_str(dims) + ": n_prefill " + std::to_string(dims[1]) +
                    " exceeds prompt_len " + std::to_string(info_.prompt_len) +
                    " (prefill queries are prompt positions)");
            n_pf = (int)dims[1];
            Hid ds(H5Dopen2(g, "prefill_queries", H5P_DEFAULT));
            std::optional<h5::AttrValue> fp;
            try {
                fp = h5::read_attr(ds, "first_position");
            } catch (const std::exception& e) {
                err(dn + ": " + e.what());
            }
            if (!fp) err(dn + " has no attribute 'first_position' (expected the integer position of its first query)");
            if (fp->kind != h5::AttrValue::Int || fp->npoints != 1)
                err(dn + " attribute 'first_position' is " + fp->to_string() + ", expected a scalar integer");
            // Written as first_position > prompt_len - n_prefill: the sum overflows for first_position
            // near INT64_MAX (and would then pass); n_prefill <= prompt_len was checked above.
            if (fp->i < 0 || fp->i > (long long)info_.prompt_len - n_pf)
                err(dn + ": first_position " + std::to_string(fp->i) + " + n_prefill " + std::to_string(n_pf) +
                    " exceeds prompt_len " + std::to_string(info_.prompt_len) +
                    " (expected 0 <= first_position and first_position + n_prefill <= prompt_len)");
            first = (int)fp->i;
        }
        if (first_layer) {
            info_.num_prefill_queries = n_pf;
            info_.prefill_first_position = first;
            ref_layer = l;
            first_layer = false;
        } else if (n_pf != info_.num_prefill_queries || first != info_.prefill_first_position) {
            const auto desc = [](int n, int f) {
                return n == 0 ? std::string("no prefill_queries")
                              : "prefill_queries with n_prefill " + std::to_string(n) + ", first_position " +
                                    std::to_string(f);
            };
            err(gname + " has " + desc(n_pf, first) + " but /layers/" + std::to_string(ref_layer) + " has " +
                desc(info_.num_prefill_queries, info_.prefill_first_position) +
                " (prefill_queries must have the same shape and first_position in every layer, or be absent "
                "from all)");
        }
    }
    impl_->file = std::move(file);
}

TraceReader::~TraceReader() {
    if (!impl_) return;
    h5::Lock lk;
    impl_->file.reset();
}

bool TraceReader::has_layer(int layer) const {
    return std::binary_search(info_.layers.begin(), info_.layers.end(), layer);
}

HeadSlice TraceReader::read_head(int layer, int kv_head, const ReadOptions& opt) const {
    const std::string& path = info_.path;
    if (!has_layer(layer)) {
        std::string present;
        for (size_t i = 0; i < info_.layers.size(); ++i) present += (i ? ", " : "") + std::to_string(info_.layers[i]);
        throw TraceError(path + ": layer " + std::to_string(layer) + " is not in the trace (layers present: " +
                         present + ")");
    }
    if (kv_head < 0 || kv_head >= info_.num_kv_heads)
        throw TraceError(path + ": kv_head " + std::to_string(kv_head) + " out of range [0, " +
                         std::to_string(info_.num_kv_heads) + ") (num_kv_heads)");
    {  // a header may declare up to 2^30 tokens: refuse a slice that cannot fit, instead of std::bad_alloc
        const MemoryEstimate need{head_slice_bytes(info_, opt.max_steps, opt.prefill_queries),
                                  path + ": reading layer " + std::to_string(layer) + " KV head " +
                                      std::to_string(kv_head) + " (" + std::to_string(info_.n_tokens()) +
                                      " tokens x head_dim " + std::to_string(info_.head_dim) + ")",
                                  "read fewer decode steps or use a smaller trace"};
        check_memory(need, memory_limit(""));
    }
    HeadSlice s;
    s.layer = layer;
    s.kv_head = kv_head;
    s.head_dim = info_.head_dim;
    s.prompt_len = info_.prompt_len;
    s.num_steps = opt.max_steps < 0 ? info_.num_decode_steps : std::min(opt.max_steps, info_.num_decode_steps);
    s.group = info_.group_size();
    s.first_q_head = kv_head * s.group;
    const bool pf = opt.prefill_queries && info_.num_prefill_queries > 0;
    s.num_prefill = pf ? info_.num_prefill_queries : 0;
    s.prefill_first_position = pf ? info_.prefill_first_position : 0;

    const hsize_t d = (hsize_t)s.head_dim;
    const hsize_t kv_start[3] = {(hsize_t)kv_head, 0, 0};
    const hsize_t kv_count[3] = {1, (hsize_t)s.n_tokens(), d};
    const hsize_t q_start[3] = {(hsize_t)s.first_q_head, 0, 0};
    const hsize_t q_count[3] = {(hsize_t)s.group, (hsize_t)s.num_steps, d};
    const hsize_t p_count[3] = {(hsize_t)s.group, (hsize_t)s.num_prefill, d};
    Raw rk, rv, rq, rp;
    {
        h5::Lock lk;
        impl_->read(path, layer, "keys", info_.dtype, kv_start, kv_count, rk);
        impl_->read(path, layer, "values", info_.dtype, kv_start, kv_count, rv);
        impl_->read(path, layer, "queries", info_.dtype, q_start, q_count, rq);
        if (pf) impl_->read(path, layer, "prefill_queries", info_.dtype, q_start, p_count, rp);
    }
    // Decode and check outside the lock so worker threads overlap this work.
    const auto take = [&](Raw& r, std::vector<float>& out) {
        if (info_.dtype == DType::f32) out = std::move(r.f32);
        else decode16(r, info_.dtype, out);
    };
    take(rk, s.keys);
    take(rv, s.values);
    take(rq, s.queries);
    if (pf) take(rp, s.prefill_queries);

    if (opt.check_finite) {
        const auto check = [&](const std::vector<float>& x, const char* name, int head0, const char* axis, int pos0,
                               hsize_t n1) {
            const auto it = std::find_if(x.begin(), x.end(), [](float v) { return !std::isfinite(v); });
            if (it == x.end()) return;
            const size_t i = (size_t)(it - x.begin());
            const size_t dim = i % d, t = (i / d) % n1, h = i / (d * n1);
            throw TraceError(path + ": /layers/" + std::to_string(layer) + "/" + name + " has a non-finite value (" +
                             (std::isnan(*it) ? "nan" : *it > 0 ? "inf" : "-inf") + ") at (head " +
                             std::to_string(head0 + h) + ", " + axis + " " + std::to_string(pos0 + t) + ", dim " +
                             std::to_string(dim) + ")");
        };
        check(s.keys, "keys", kv_head, "token", 0, kv_count[1]);
        check(s.values, "values", kv_head, "token", 0, kv_count[1]);
        check(s.queries, "queries", s.first_q_head, "step", 0, q_count[1]);
        if (pf) check(s.prefill_queries, "prefill_queries", s.first_q_head, "token", s.prefill_first_position,
                      p_count[1]);
    }
    return s;
}

}  // namespace retro
