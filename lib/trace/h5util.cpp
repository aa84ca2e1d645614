#include "trace/h5util.hpp"

#include <charconv>
#include <cstring>
#include <stdexcept>

namespace retro::h5 {

std::mutex& h5_mutex() {
    static std::mutex m;
    static const bool silenced = [] {
        // Called once, before anyone can hold the lock; nothing else runs HDF5 concurrently here
        // because every HDF5 user goes through this function first.
        H5open();
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
        return true;
    }();
    (void)silenced;
    return m;
}

void Hid::reset() {
    if (id_ < 0) return;
    switch (H5Iget_type(id_)) {
        case H5I_FILE: H5Fclose(id_); break;
        case H5I_GROUP: H5Gclose(id_); break;
        case H5I_DATASET: H5Dclose(id_); break;
        case H5I_DATASPACE: H5Sclose(id_); break;
        case H5I_DATATYPE: H5Tclose(id_); break;
        case H5I_ATTR: H5Aclose(id_); break;
        case H5I_GENPROP_LST: H5Pclose(id_); break;
        default: H5Idec_ref(id_); break;
    }
    id_ = H5I_INVALID_HID;
}

Hid make_f16_type() {
    Hid t(H5Tcopy(H5T_IEEE_F32LE));
    if (!t.valid() || H5Tset_fields(t, 15, 10, 5, 0, 10) < 0 || H5Tset_size(t, 2) < 0 ||
        H5Tset_ebias(t, 15) < 0)
        throw std::runtime_error("cannot build the HDF5 float16 type");
    return t;
}

bool link_exists(hid_t loc, const char* name) { return H5Lexists(loc, name, H5P_DEFAULT) > 0; }

namespace {

std::string num_to_string(double v) {
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
}

bool host_little_endian() {
    const uint16_t x = 1;
    unsigned char c;
    std::memcpy(&c, &x, 1);
    return c == 1;
}

}  // namespace

const char* AttrValue::kind_name() const {
    switch (kind) {
        case String: return "string";
        case Int: return "integer";
        case Float: return "float";
        default: return "unsupported type";
    }
}

std::string AttrValue::to_string() const {
    switch (kind) {
        case String: return s;
        case Int: {
            if (npoints == 1) return std::to_string(i);
            std::string out = "[";
            for (size_t k = 0; k < ints.size(); ++k) out += (k ? ", " : "") + std::to_string(ints[k]);
            return out + "]";
        }
        case Float: {
            if (npoints == 1) return num_to_string(f);
            std::string out = "[";
            for (size_t k = 0; k < floats.size(); ++k) out += (k ? ", " : "") + num_to_string(floats[k]);
            return out + "]";
        }
        default: return "<unsupported type>";
    }
}

std::optional<AttrValue> read_attr(hid_t obj, const char* name) {
    const htri_t ex = H5Aexists(obj, name);
    if (ex < 0) throw std::runtime_error(std::string("cannot query attribute '") + name + "'");
    if (ex == 0) return std::nullopt;
    const auto fail = [&](const char* what) {
        throw std::runtime_error(std::string("cannot read attribute '") + name + "' (" + what + ")");
    };
    Hid a(H5Aopen(obj, name, H5P_DEFAULT));
    if (!a.valid()) fail("open failed");
    Hid space(H5Aget_space(a));
    Hid ftype(H5Aget_type(a));
    if (!space.valid() || !ftype.valid()) fail("no dataspace or type");
    const hssize_t np = H5Sget_simple_extent_npoints(space);
    if (np < 0) fail("bad dataspace");
    // A corrupt header can declare any size; attributes are small metadata (64 KiB compact storage).
    constexpr hssize_t kMaxAttrPoints = 1 << 20;
    if (np > kMaxAttrPoints) fail("dataspace of more than 2^20 elements: corrupt");
    AttrValue v;
    v.npoints = (size_t)np;
    if (np == 0) return v;  // empty / null dataspace: Other
    switch (H5Tget_class(ftype)) {
        case H5T_STRING: {
            if (np != 1) return v;  // arrays of strings: unsupported
            v.kind = AttrValue::String;
            const htri_t vlen = H5Tis_variable_str(ftype);
            if (vlen < 0) fail("bad string type");
            if (vlen) {
                Hid mt(H5Tcopy(H5T_C_S1));
                H5Tset_size(mt, H5T_VARIABLE);
                H5Tset_cset(mt, H5Tget_cset(ftype));
                char* p = nullptr;
                if (H5Aread(a, mt, &p) < 0) fail("string read failed");
                if (p) v.s = p;
                H5Dvlen_reclaim(mt, space, H5P_DEFAULT, &p);
            } else {
                const size_t n = H5Tget_size(ftype);
                if (n == 0 || n > ((size_t)1 << 20)) fail("fixed-length string size 0 or above 1 MiB: corrupt");
                std::vector<char> buf(n + 1, '\0');
                Hid mt(H5Tcopy(ftype));
                if (H5Aread(a, mt, buf.data()) < 0) fail("string read failed");
                v.s.assign(buf.data(), strnlen(buf.data(), n));
                if (H5Tget_strpad(ftype) == H5T_STR_SPACEPAD)
                    while (!v.s.empty() && v.s.back() == ' ') v.s.pop_back();
            }
            return v;
        }
        case H5T_INTEGER: {
            v.kind = AttrValue::Int;
            v.ints.resize((size_t)np);
            if (H5Aread(a, H5T_NATIVE_LLONG, v.ints.data()) < 0) fail("integer read failed");
            v.i = v.ints[0];
            return v;
        }
        case H5T_ENUM: {
            // numpy bool (h5py writes an int8 enum FALSE/TRUE): HDF5 cannot convert enum -> integer, so
            // read the raw base integers and widen them here.
            Hid super(H5Tget_super(ftype));
            const size_t sz = H5Tget_size(ftype);
            if (!super.valid() || H5Tget_class(super) != H5T_INTEGER || sz == 0 || sz > 8 ||
                (H5Tget_order(super) == H5T_ORDER_LE) != host_little_endian())
                return v;
            const bool is_signed = H5Tget_sign(super) == H5T_SGN_2;
            std::vector<unsigned char> raw((size_t)np * sz);
            Hid mt(H5Tcopy(ftype));
            if (H5Aread(a, mt, raw.data()) < 0) fail("enum read failed");
            v.kind = AttrValue::Int;
            for (hssize_t k = 0; k < np; ++k) {
                uint64_t u = 0;
                std::memcpy(&u, raw.data() + k * sz, sz);  // little-endian host: low bytes first
                if (is_signed && sz < 8 && (u >> (8 * sz - 1)) & 1u) u |= ~uint64_t(0) << (8 * sz);
                v.ints.push_back((long long)u);
            }
            v.i = v.ints[0];
            return v;
        }
        case H5T_FLOAT: {
            v.kind = AttrValue::Float;
            v.floats.resize((size_t)np);
            if (H5Aread(a, H5T_NATIVE_DOUBLE, v.floats.data()) < 0) fail("float read failed");
            v.f = v.floats[0];
            return v;
        }
        default: return v;
    }
}

std::vector<std::string> attr_names(hid_t obj) {
    std::vector<std::string> names;
    auto cb = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->push_back(name);
        return 0;
    };
    hsize_t idx = 0;
    if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, cb, &names) < 0)
        throw std::runtime_error("cannot list attributes");
    return names;
}

namespace {
void write_scalar(hid_t obj, const char* name, hid_t ftype, hid_t mtype, const void* buf) {
    Hid space(H5Screate(H5S_SCALAR));
    if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
    Hid a(H5Acreate2(obj, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT));
    if (!a.valid() || H5Awrite(a, mtype, buf) < 0)
        throw std::runtime_error(std::string("cannot write attribute '") + name + "'");
}
}  // namespace

void write_attr_string(hid_t obj, const char* name, const std::string& value) {
    Hid t(H5Tcopy(H5T_C_S1));
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    const char* p = value.c_str();
    write_scalar(obj, name, t, t, &p);
}

void write_attr_int(hid_t obj, const char* name, long long value) {
    write_scalar(obj, name, H5T_STD_I64LE, H5T_NATIVE_LLONG, &value);
}

void write_attr_double(hid_t obj, const char* name, double value) {
    write_scalar(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

}  // namespace retro::h5
