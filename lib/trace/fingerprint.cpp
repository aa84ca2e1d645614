#include "trace/fingerprint.hpp"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "trace/h5util.hpp"

namespace retro {

namespace {

using h5::Hid;

uint64_t mix(uint64_t h, const void* data, size_t n) {
    return fnv1a64(std::string_view(static_cast<const char*>(data), n), h);
}
template <class T>
uint64_t mix_value(uint64_t h, T v) {
    return mix(h, &v, sizeof v);
}

/// Hashes one dataset [a, b, c]: shape, stored size and two blocks of up to 8 rows (one head each).
uint64_t hash_dataset(uint64_t h, hid_t group, const std::string& where, const char* name, int layer) {
    const auto fail = [&](const std::string& what) -> void {
        throw TraceError(where + "/" + name + ": " + what + " (while fingerprinting the trace)");
    };
    Hid ds(H5Dopen2(group, name, H5P_DEFAULT));
    if (!ds.valid()) fail("cannot open dataset");
    Hid space(H5Dget_space(ds)), type(H5Dget_type(ds));
    if (!space.valid() || !type.valid() || H5Sget_simple_extent_ndims(space) != 3) fail("unreadable dataspace");
    hsize_t dims[3];
    H5Sget_simple_extent_dims(space, dims, nullptr);
    h = mix(h, name, std::char_traits<char>::length(name));
    h = mix(h, dims, sizeof dims);
    h = mix_value(h, (unsigned long long)H5Dget_storage_size(ds));
    const size_t elem = H5Tget_size(type);
    if (dims[0] == 0 || dims[1] == 0 || dims[2] == 0 || elem == 0) return h;
    const hsize_t rows = std::min<hsize_t>(8, dims[1]);
    std::vector<unsigned char> buf((size_t)(rows * dims[2] * elem));
    for (int s = 0; s < 2; ++s) {
        // Positions spread over heads and tokens, different in every layer: (layer, sample) -> head, row.
        const uint64_t pick = fnv1a64(std::to_string(layer) + "/" + name + "/" + std::to_string(s));
        const hsize_t head = pick % dims[0];
        const hsize_t row = s == 0 ? (pick >> 20) % (dims[1] - rows + 1) : dims[1] - rows;  // 2nd: the tail
        const hsize_t start[3] = {head, row, 0}, count[3] = {1, rows, dims[2]};
        Hid mspace(H5Screate_simple(3, count, nullptr));
        if (!mspace.valid() || H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr) < 0 ||
            H5Dread(ds, type, mspace, space, H5P_DEFAULT, buf.data()) < 0)
            fail("cannot read rows " + std::to_string(row) + ".." + std::to_string(row + rows - 1) + " of head " +
                 std::to_string(head) + " (truncated or corrupt file?)");
        h = mix(h, buf.data(), buf.size());
    }
    return h;
}

}  // namespace

std::string trace_fingerprint(const std::string& path, const TraceInfo& info) {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(path, ec);
    if (ec) throw TraceError(path + ": cannot read its size: " + ec.message());
    uint64_t h = fnv1a64("retro-trace-fingerprint-v1");
    h = mix_value(h, (unsigned long long)bytes);
    h5::Lock lk;
    Hid fapl(H5Pcreate(H5P_FILE_ACCESS));
#if H5_VERSION_GE(1, 10, 7)
    H5Pset_file_locking(fapl, true, true);  // as TraceReader: tolerate file systems without locks
#endif
    Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl));
    if (!file.valid()) throw TraceError(path + ": not a readable HDF5 file (while fingerprinting the trace)");
    for (int l : info.layers) {
        const std::string where = path + ": /layers/" + std::to_string(l);
        h = mix_value(h, l);
        Hid g(H5Gopen2(file, ("layers/" + std::to_string(l)).c_str(), H5P_DEFAULT));
        if (!g.valid()) throw TraceError(where + ": cannot open the layer group (while fingerprinting the trace)");
        for (const char* name : {"keys", "values", "queries", "prefill_queries"})
            if (h5::link_exists(g, name)) h = hash_dataset(h, g, where, name, l);
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
    return "v1-" + std::to_string(bytes) + "-" + hex;
}

}  // namespace retro
