#pragma once
// Private helpers of the trace reader/writer around the HDF5 C API: one process-wide lock, RAII handles
// and typed attribute access.
//
// Thread safety: Debian's libhdf5 is built without --enable-threadsafe, so no two threads may be inside
// the HDF5 library at once, even on different files. Every HDF5 call in retro-bench goes through
// h5_lock() (one process-wide std::mutex); the reader takes it only around the HDF5 calls themselves and
// converts/checks the data outside it, so worker threads reading different heads overlap their
// conversion work. Code outside lib/trace must not call HDF5 directly without taking this lock.
#include <hdf5.h>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace retro::h5 {

/// The process-wide HDF5 lock. The first call also silences HDF5's automatic error-stack printing
/// (the library never prints: failures become TraceError).
std::mutex& h5_mutex();

/// Holds h5_mutex() for its lifetime. Declare it before any Hid in the same scope so the handles are
/// closed while the lock is still held.
class Lock {
  public:
    Lock() : lock_(h5_mutex()) {}

  private:
    std::lock_guard<std::mutex> lock_;
};

/// Owning HDF5 identifier (file, group, dataset, dataspace, datatype, attribute or property list),
/// closed with the matching H5?close on destruction. Must be destroyed while the HDF5 lock is held.
class Hid {
  public:
    Hid() = default;
    explicit Hid(hid_t id) : id_(id) {}
    ~Hid() { reset(); }
    Hid(Hid&& o) noexcept : id_(o.id_) { o.id_ = H5I_INVALID_HID; }
    Hid& operator=(Hid&& o) noexcept {
        if (this != &o) {
            reset();
            id_ = o.id_;
            o.id_ = H5I_INVALID_HID;
        }
        return *this;
    }
    Hid(const Hid&) = delete;
    Hid& operator=(const Hid&) = delete;

    hid_t get() const { return id_; }
    operator hid_t() const { return id_; }
    bool valid() const { return id_ >= 0; }
    void reset();
    /// Gives up ownership without closing.
    hid_t release() {
        const hid_t id = id_;
        id_ = H5I_INVALID_HID;
        return id;
    }

  private:
    hid_t id_ = H5I_INVALID_HID;
};

/// Root attributes of trace format v1 (docs/trace-format.md); any other root attribute is "extra".
inline constexpr const char* kRootAttrs[] = {
    "format",       "version",          "model",        "num_layers",   "num_q_heads",
    "num_kv_heads", "head_dim",         "prompt_len",   "num_decode_steps",
    "rope_applied", "rope_layout",      "rope_theta",   "source",       "dtype"};

/// IEEE binary16 little-endian file type (h5py/numpy read it as float16). Caller owns the result.
Hid make_f16_type();

/// Does the link `name` exist under `loc` (no error when it doesn't)?
bool link_exists(hid_t loc, const char* name);

/// Value of an attribute, as read generically (for `extra` and for typed reads below).
struct AttrValue {
    enum Kind { String, Int, Float, Other } kind = Other;
    std::string s;
    long long i = 0;
    double f = 0;
    size_t npoints = 1;
    std::vector<long long> ints;  ///< all elements when Int with npoints > 1
    std::vector<double> floats;   ///< all elements when Float with npoints > 1
    /// Human readable rendering: the string, the number, "[a, b, ...]" for arrays.
    std::string to_string() const;
    const char* kind_name() const;
};

/// Reads attribute `name` of `obj`. Returns nullopt when it does not exist; throws std::runtime_error
/// (message without path; callers prefix it) when it exists but cannot be read.
std::optional<AttrValue> read_attr(hid_t obj, const char* name);

/// Names of all attributes of `obj`, in creation/name order.
std::vector<std::string> attr_names(hid_t obj);

/// Writers of scalar attributes (variable-length UTF-8 strings, int64, float64).
void write_attr_string(hid_t obj, const char* name, const std::string& value);
void write_attr_int(hid_t obj, const char* name, long long value);
void write_attr_double(hid_t obj, const char* name, double value);

}  // namespace retro::h5
