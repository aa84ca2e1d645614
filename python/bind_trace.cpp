// Trace: a trace file opened and validated once (trace/reader), its metadata as a dict and one
// (layer, KV head) at a time as NumPy arrays that own the reader's buffers (no copy).
#include <memory>

#include <pybind11/stl.h>

#include "bindings.hpp"
#include "numpy_util.hpp"
#include "trace/reader.hpp"

namespace retro::pyb {
namespace {

py::dict info_dict(const TraceInfo& t) {
    py::dict d;
    d["path"] = t.path;
    d["version"] = t.version;
    d["model"] = t.model;
    d["num_layers"] = t.num_layers;
    d["num_q_heads"] = t.num_q_heads;
    d["num_kv_heads"] = t.num_kv_heads;
    d["group"] = t.group_size();
    d["head_dim"] = t.head_dim;
    d["prompt_len"] = t.prompt_len;
    d["num_decode_steps"] = t.num_decode_steps;
    d["n_tokens"] = t.n_tokens();
    d["dtype"] = dtype_name(t.dtype);
    d["layers"] = py::cast(t.layers);
    d["num_prefill_queries"] = t.num_prefill_queries;
    d["prefill_first_position"] = t.prefill_first_position;
    d["rope_applied"] = t.rope_applied;
    d["rope_layout"] = t.rope_layout;
    d["rope_theta"] = t.rope_theta;
    d["source"] = t.source;
    d["extra"] = py::cast(t.extra);
    return d;
}

py::dict head_dict(HeadSlice&& s) {
    const py::ssize_t d = s.head_dim, n = s.n_tokens(), g = s.group;
    py::dict h;
    h["layer"] = s.layer;
    h["kv_head"] = s.kv_head;
    h["head_dim"] = s.head_dim;
    h["group"] = s.group;
    h["first_q_head"] = s.first_q_head;
    h["prompt_len"] = s.prompt_len;
    h["num_steps"] = s.num_steps;
    h["num_prefill"] = s.num_prefill;
    h["prefill_first_position"] = s.prefill_first_position;
    h["keys"] = to_numpy(std::move(s.keys), {n, d});
    h["values"] = to_numpy(std::move(s.values), {n, d});
    h["queries"] = to_numpy(std::move(s.queries), {g, (py::ssize_t)s.num_steps, d});
    h["prefill_queries"] = to_numpy(std::move(s.prefill_queries), {g, (py::ssize_t)s.num_prefill, d});
    return h;
}

}  // namespace

void bind_trace(py::module_& m) {
    py::class_<TraceReader>(m, "Trace",
                            "A retro-bench trace (HDF5, docs/trace-format.md), opened and validated (metadata "
                            "only). Raises TraceError (a ValueError) naming the file and what is wrong.")
        .def(py::init([](const std::string& path) {
                 py::gil_scoped_release nogil;
                 return std::make_unique<TraceReader>(path);
             }),
             py::arg("path"))
        .def_property_readonly("info", [](const TraceReader& r) { return info_dict(r.info()); },
                               "Root attributes: model, num_layers, num_q_heads, num_kv_heads, group, head_dim, "
                               "prompt_len, num_decode_steps, n_tokens, dtype, layers (present), "
                               "num_prefill_queries, rope_*, source, extra.")
        .def_property_readonly("path", [](const TraceReader& r) { return r.info().path; })
        .def("has_layer", &TraceReader::has_layer, py::arg("layer"))
        .def(
            "read_head",
            [](const TraceReader& r, int layer, int kv_head, const py::object& max_steps, bool prefill_queries) {
                ReadOptions ro;
                ro.prefill_queries = prefill_queries;
                if (!max_steps.is_none()) {
                    ro.max_steps = max_steps.cast<int>();
                    if (ro.max_steps < 0)
                        throw py::value_error("read_head: max_steps must be >= 0 or None, got " +
                                              std::to_string(ro.max_steps));
                }
                HeadSlice s;
                {
                    py::gil_scoped_release nogil;
                    s = r.read_head(layer, kv_head, ro);
                }
                return head_dict(std::move(s));
            },
            py::arg("layer"), py::arg("kv_head"), py::arg("max_steps") = py::none(),
            py::arg("prefill_queries") = true,
            "One layer x KV head as float32 arrays: keys [n, d] and values [n, d] (n = prompt_len + num_steps), "
            "queries [group, num_steps, d] (step t sees tokens [0, prompt_len + t]), prefill_queries [group, "
            "num_prefill, d]; plus layer, kv_head, head_dim, group, first_q_head, prompt_len, num_steps, "
            "num_prefill, prefill_first_position. max_steps reads only the first steps.");
}

}  // namespace retro::pyb
