#include "py_selection.hpp"

#include <pybind11/numpy.h>

#include <cmath>

namespace retro::pym {
namespace {

using I64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
using F64 = py::array_t<double, py::array::c_style | py::array::forcecast>;

std::string type_name(const py::handle& o) { return py::str(py::type::of(o).attr("__name__")); }

std::string shape_text(const py::array& a) {
    std::string s = "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + (a.ndim() == 1 ? ",)" : ")");
}

py::array as_array(const py::handle& o, const std::string& what) {
    py::array a;
    try {
        a = py::array::ensure(o);
    } catch (const py::error_already_set&) {
    }
    if (!a) throw BadReturn(what + ": expected a NumPy array (or a list), got " + type_name(o));
    return a;
}

/// Token ids of one list: integers in [0, n), unique when `unique`.
std::vector<int32_t> ids_of(const py::handle& o, int n, bool unique, const std::string& what) {
    const py::array a = as_array(o, what);
    const char kind = a.dtype().kind();
    if (kind == 'b') throw BadReturn(what + ": got a boolean mask; return token ids (np.flatnonzero(mask))");
    if (a.size() > 0 && kind != 'i' && kind != 'u')
        throw BadReturn(what + ": expected integer token ids, got dtype " + std::string(py::str(a.dtype())));
    if (a.ndim() != 1) throw BadReturn(what + ": expected a 1-D array of token ids, got shape " + shape_text(a));
    const I64 ids = I64::ensure(a);
    std::vector<int32_t> out((size_t)ids.size());
    std::vector<char> seen(unique ? (size_t)n : 0, 0);
    for (py::ssize_t i = 0; i < ids.size(); ++i) {
        const int64_t id = ids.data()[i];
        if (id < 0 || id >= n)
            throw BadReturn(what + ": token id " + std::to_string(id) + " at index " + std::to_string(i) +
                            " is out of range: visible tokens are [0, " + std::to_string(n) + ")");
        if (unique && seen[(size_t)id]++)
            throw BadReturn(what + ": token id " + std::to_string(id) + " appears twice (duplicates are not allowed)");
        out[(size_t)i] = (int32_t)id;
    }
    return out;
}

/// Finite float32 values of a 1-D array of `len` entries (-1: any length).
std::vector<float> floats_of(const py::handle& o, py::ssize_t len, const std::string& what) {
    const py::array a = as_array(o, what);
    const char kind = a.dtype().kind();
    if (a.size() > 0 && kind != 'f' && kind != 'i' && kind != 'u')
        throw BadReturn(what + ": expected real numbers, got dtype " + std::string(py::str(a.dtype())));
    if (a.ndim() != 1 || (len >= 0 && a.shape(0) != len))
        throw BadReturn(what + ": expected shape (" + (len >= 0 ? std::to_string(len) : "k") + ",), got " +
                        shape_text(a));
    const F64 v = F64::ensure(a);
    std::vector<float> out((size_t)v.size());
    for (py::ssize_t i = 0; i < v.size(); ++i) {
        if (!std::isfinite(v.data()[i]))
            throw BadReturn(what + ": NaN or Inf at index " + std::to_string(i));
        out[(size_t)i] = (float)v.data()[i];
    }
    return out;
}

/// The rows of a per-head structure: a list/tuple of arrays (ragged allowed) or a 2-D array.
/// Returns false for a flat (shared) list.
bool rows_of(const py::handle& o, std::vector<py::object>& rows, const std::string& what) {
    rows.clear();
    if (py::isinstance<py::list>(o) || py::isinstance<py::tuple>(o)) {
        const py::sequence s = py::reinterpret_borrow<py::sequence>(o);
        if (s.size() == 0) return false;
        bool nested = false;
        for (const auto& x : s)
            nested = nested || py::isinstance<py::list>(x) || py::isinstance<py::tuple>(x) ||
                     (py::isinstance<py::array>(x) && py::reinterpret_borrow<py::array>(x).ndim() >= 1);
        if (!nested) return false;
        for (const auto& x : s) rows.push_back(py::reinterpret_borrow<py::object>(x));
        return true;
    }
    const py::array a = as_array(o, what);
    if (a.ndim() != 2) return false;
    for (py::ssize_t i = 0; i < a.shape(0); ++i) rows.push_back(a[py::int_(i)]);
    return true;
}

void exact_of(const py::handle& o, int group, int n, Selection& out) {
    std::vector<py::object> rows;
    if (!rows_of(o, rows, "exact")) {
        out.exact.push_back(ids_of(o, n, true, "exact"));
        return;
    }
    if (rows.size() != 1 && rows.size() != (size_t)group)
        throw BadReturn("exact: " + std::to_string(rows.size()) + " lists; expected 1 (shared) or group = " +
                        std::to_string(group) + " (one per query head)");
    for (size_t h = 0; h < rows.size(); ++h)
        out.exact.push_back(ids_of(rows[h], n, true, "exact[" + std::to_string(h) + "]"));
}

void log_weights_of(const py::handle& o, Selection& out) {
    std::vector<py::object> rows;
    if (!rows_of(o, rows, "log_weights")) rows = {py::reinterpret_borrow<py::object>(o)};
    if (rows.size() != out.exact.size())
        throw BadReturn("log_weights: " + std::to_string(rows.size()) + " lists; expected " +
                        std::to_string(out.exact.size()) + " (one per exact list)");
    for (size_t l = 0; l < rows.size(); ++l)
        out.exact_log_weight.push_back(
            floats_of(rows[l], (py::ssize_t)out.exact[l].size(), "log_weights[" + std::to_string(l) + "]"));
}

/// [rows, d] finite float32, row-major.
std::vector<float> matrix_of(const py::handle& o, py::ssize_t rows, int d, const std::string& what) {
    const py::array a = as_array(o, what);
    if (a.ndim() != 2 || a.shape(1) != d || (rows >= 0 && a.shape(0) != rows))
        throw BadReturn(what + ": expected shape (" + (rows >= 0 ? std::to_string(rows) : "c") + ", " +
                        std::to_string(d) + "), got " + shape_text(a));
    const F64 v = F64::ensure(a);
    std::vector<float> out((size_t)v.size());
    for (py::ssize_t i = 0; i < v.size(); ++i) {
        if (!std::isfinite(v.data()[i])) throw BadReturn(what + ": NaN or Inf at flat index " + std::to_string(i));
        out[(size_t)i] = (float)v.data()[i];
    }
    return out;
}

void estimated_of(const py::handle& o, int d, Selection& out, EstimatedStore& store) {
    if (!py::isinstance<py::dict>(o))
        throw BadReturn("estimated: expected a dict {centroids, sizes, value_sums}, got " + type_name(o));
    const py::dict e = py::reinterpret_borrow<py::dict>(o);
    for (const auto& k : {"centroids", "sizes", "value_sums"})
        if (!e.contains(k)) throw BadReturn(std::string("estimated: missing '") + k + "'");
    if (e.size() != 3) throw BadReturn("estimated: expected exactly the keys centroids, sizes, value_sums");
    store.centroids = matrix_of(e["centroids"], -1, d, "estimated['centroids']");
    const py::ssize_t c = (py::ssize_t)(store.centroids.size() / (size_t)d);
    const std::vector<float> sizes = floats_of(e["sizes"], c, "estimated['sizes']");
    store.value_sums = matrix_of(e["value_sums"], c, d, "estimated['value_sums']");
    for (py::ssize_t i = 0; i < c; ++i) {
        if (sizes[(size_t)i] <= 0) throw BadReturn("estimated['sizes'][" + std::to_string(i) + "]: must be > 0");
        out.estimated.push_back({store.centroids.data() + (size_t)i * d, sizes[(size_t)i],
                                 store.value_sums.data() + (size_t)i * d});
    }
}

double count_of(const py::handle& o, const char* what) {
    double x;
    try {
        x = py::cast<double>(o);
    } catch (const py::cast_error&) {
        throw BadReturn(std::string(what) + ": expected a number, got " + type_name(o));
    }
    if (!std::isfinite(x) || x < 0) throw BadReturn(std::string(what) + ": expected a finite number >= 0, got " +
                                                    std::to_string(x));
    return x;
}

}  // namespace

void to_selection(const py::handle& r, int group, int d, int n, Selection& out, EstimatedStore& store) {
    out.clear();
    if (!py::isinstance<py::dict>(r)) {
        if (r.is_none()) throw BadReturn("returned None; return the exact token ids or a dict (see the contract)");
        exact_of(r, group, n, out);
        return;
    }
    const py::dict res = py::reinterpret_borrow<py::dict>(r);
    static const char* const known[] = {"exact",     "log_weights", "estimated",    "scan_ops",         "h2d_bytes",
                                        "d2h_bytes", "fetch_tokens", "fetch_units", "fetch_unit_tokens"};
    for (const auto& item : res) {
        const std::string k = py::str(item.first);
        bool ok = false;
        for (const char* x : known) ok = ok || k == x;
        if (!ok)
            throw BadReturn("unknown key '" + k + "' in the returned dict (keys: exact, log_weights, estimated, "
                            "scan_ops, h2d_bytes, d2h_bytes, fetch_tokens, fetch_units, fetch_unit_tokens)");
    }
    if (res.contains("exact")) exact_of(res["exact"], group, n, out);
    if (res.contains("log_weights")) log_weights_of(res["log_weights"], out);
    if (res.contains("estimated")) estimated_of(res["estimated"], d, out, store);
    if (res.contains("scan_ops")) out.scan_ops = count_of(res["scan_ops"], "scan_ops");
    if (res.contains("h2d_bytes")) out.h2d_bytes = count_of(res["h2d_bytes"], "h2d_bytes");
    if (res.contains("d2h_bytes")) out.d2h_bytes = count_of(res["d2h_bytes"], "d2h_bytes");
    if (res.contains("fetch_tokens")) out.fetch_tokens = ids_of(res["fetch_tokens"], n, false, "fetch_tokens");
    if (res.contains("fetch_units") != res.contains("fetch_unit_tokens"))
        throw BadReturn("fetch_units and fetch_unit_tokens go together (the units and their sizes in tokens)");
    if (res.contains("fetch_units")) {
        const I64 units = I64::ensure(as_array(res["fetch_units"], "fetch_units"));
        const I64 tokens = I64::ensure(as_array(res["fetch_unit_tokens"], "fetch_unit_tokens"));
        if (!units || !tokens || units.ndim() != 1 || tokens.ndim() != 1 || units.size() != tokens.size())
            throw BadReturn("fetch_units, fetch_unit_tokens: expected two 1-D integer arrays of one length");
        for (py::ssize_t i = 0; i < units.size(); ++i) {
            if (units.data()[i] < 0 || tokens.data()[i] <= 0)
                throw BadReturn("fetch_units[" + std::to_string(i) + "] must be >= 0 and fetch_unit_tokens > 0");
            out.fetch_units.push_back(units.data()[i]);
            out.fetch_unit_tokens.push_back((int32_t)tokens.data()[i]);
        }
    }
}

}  // namespace retro::pym
