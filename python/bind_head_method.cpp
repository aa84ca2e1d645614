// HeadMethod: one method on one (layer, KV head), fed prompt and decode KV from Python and asked for the
// attention output of a step's queries (python/head_method.hpp). Inputs are validated here, before any
// C++ work; the work itself runs with the GIL released.
#include <mutex>

#include "bindings.hpp"
#include "head_method.hpp"
#include "json_py.hpp"
#include "numpy_util.hpp"

namespace retro::pyb {
namespace {

DType parse_storage(const std::string& s) {
    if (s == "f16" || s == "float16") return DType::f16;
    if (s == "bf16" || s == "bfloat16") return DType::bf16;
    if (s == "f32" || s == "float32") return DType::f32;
    throw py::value_error("HeadMethod: storage '" + s + "' is not one of f16|bf16|f32 (or float16|bfloat16|float32)");
}

std::string where(const HeadMethod& h, const char* fn) { return "HeadMethod('" + h.method() + "')." + fn; }

/// keys or values for build/append: [m, d], or [d] for one token.
F32Array kv_rows(const HeadMethod& h, const py::object& obj, const char* fn, const char* name) {
    const std::string what = where(h, fn) + ": " + name;
    F32Array a = as_f32(obj, what);
    const py::ssize_t d = h.context().head_dim;
    if (a.ndim() == 1 && std::string(fn) == "append") a = F32Array::ensure(a.reshape({(py::ssize_t)1, d}));
    check_shape(a, {-1, d}, what, std::string("[n, head_dim=") + std::to_string(d) + "]");
    check_finite(a, what);
    return a;
}

py::dict attend_dict(const HeadMethod& h, AttendResult&& r) {
    const MethodContext& ctx = h.context();
    const py::ssize_t g = ctx.group, d = ctx.head_dim;
    const double n = r.n_visible;
    py::dict o;
    o["out"] = to_numpy(std::move(r.out), {g, d});
    o["lse"] = to_numpy(std::move(r.lse), {g});
    o["n_visible"] = r.n_visible;
    std::vector<int64_t> exact_tokens((size_t)g);
    std::vector<double> exact_frac((size_t)g);
    py::list ids, logw;
    for (int q = 0; q < g; ++q) {
        const auto l = r.sel.exact_for(q);
        exact_tokens[(size_t)q] = (int64_t)l.size();
        exact_frac[(size_t)q] = (double)l.size() / n;
        ids.append(to_numpy(std::vector<int32_t>(l.begin(), l.end()), {(py::ssize_t)l.size()}));
        if (const float* w = r.sel.log_weight_for(q))
            logw.append(to_numpy(std::vector<float>(w, w + l.size()), {(py::ssize_t)l.size()}));
    }
    o["exact_tokens"] = to_numpy(std::move(exact_tokens), {g});
    o["exact_frac"] = to_numpy(std::move(exact_frac), {g});
    o["exact_ids"] = ids;
    o["exact_log_weight"] = r.sel.exact_log_weight.empty() ? py::object(py::none()) : py::object(logw);
    o["est_clusters"] = r.est_clusters;
    o["est_tokens"] = r.est_tokens;
    o["est_frac"] = r.est_tokens / n;
    o["scan_ops"] = r.sel.scan_ops;
    o["h2d_bytes"] = r.sel.h2d_bytes;
    o["d2h_bytes"] = r.sel.d2h_bytes;
    // No GPU block cache here: a run's fetch_bytes metric (before the cache) is the method's own figure.
    o["fetch_bytes"] = r.sel.h2d_bytes;
    o["fetch_tokens"] = r.fetch_tokens;
    return o;
}

}  // namespace

void bind_head_method(py::module_& m) {
    py::class_<HeadMethod>(m, "HeadMethod",
                           "One method instance on one (layer, KV head) (docs/python.md): build() on the prompt's "
                           "KV, append() decode tokens, attend() a step's queries.")
        .def(py::init([](const std::string& method, const py::object& params, int head_dim, int group, int layer,
                         int kv_head, const py::object& seed, const std::string& storage) {
                 HeadMethodOptions opt;
                 opt.layer = layer;
                 opt.kv_head = kv_head;
                 opt.storage = parse_storage(storage);
                 if (!seed.is_none()) {
                     const long long s = seed.cast<long long>();
                     if (s < 0 || s > 0xffffffffLL)
                         throw py::value_error("HeadMethod: seed must be in [0, 2^32) or None, got " + std::to_string(s));
                     opt.seed_given = true;
                     opt.seed = (unsigned)s;
                 }
                 const nlohmann::json p = to_json(params, "params of method '" + method + "'");
                 return std::make_unique<HeadMethod>(method, p, head_dim, group, opt);
             }),
             py::arg("method"), py::arg("params"), py::arg("head_dim"), py::arg("group"), py::arg("layer") = 0,
             py::arg("kv_head") = 0, py::arg("seed") = py::none(), py::arg("storage") = "f16",
             "params: dict (None or {} = defaults), resolved as in a run config. seed None: the seed `retro-bench "
             "run` gives this method point on this (layer, kv_head), so selections match a run's. storage: KV "
             "dtype of the byte accounting (f16|bf16|f32).")
        .def_property_readonly("method", &HeadMethod::method)
        .def_property_readonly("params", [](const HeadMethod& h) { return from_json(h.params()); },
                               "Resolved parameters (defaults filled).")
        .def_property_readonly("head_dim", [](const HeadMethod& h) { return h.context().head_dim; })
        .def_property_readonly("group", [](const HeadMethod& h) { return h.context().group; })
        .def_property_readonly("layer", [](const HeadMethod& h) { return h.context().layer; })
        .def_property_readonly("kv_head", [](const HeadMethod& h) { return h.context().kv_head; })
        .def_property_readonly("seed", [](const HeadMethod& h) { return h.context().seed; })
        .def_property_readonly("built", &HeadMethod::built)
        .def_property_readonly("prompt_len", &HeadMethod::prompt_len)
        .def_property_readonly("n_visible", &HeadMethod::visible, "Tokens visible now: prompt + appended.")
        .def_property_readonly("next_step", [](const HeadMethod& h) { return h.visible() - h.prompt_len() - 1; },
                               "The step attend() expects now (-1 before the first append).")
        .def(
            "build",
            [](HeadMethod& h, const py::object& keys_in, const py::object& values_in, const py::object& pq_in) {
                const F32Array k = kv_rows(h, keys_in, "build", "keys");
                const py::ssize_t n = k.shape(0), d = h.context().head_dim, g = h.context().group;
                F32Array v = kv_rows(h, values_in, "build", "values");
                check_shape(v, {n, d}, where(h, "build") + ": values",
                            "[n=" + std::to_string(n) + ", head_dim=" + std::to_string(d) + "] (as keys)");
                F32Array pq;
                int n_pq = 0;
                if (!pq_in.is_none()) {
                    const std::string what = where(h, "build") + ": prefill_queries";
                    pq = as_f32(pq_in, what);
                    check_shape(pq, {g, -1, d}, what,
                                "[group=" + std::to_string(g) + ", n_prefill, head_dim=" + std::to_string(d) + "]");
                    check_finite(pq, what);
                    n_pq = (int)pq.shape(1);
                }
                py::gil_scoped_release nogil;
                std::lock_guard<std::mutex> lk(h.mutex());
                h.build(k.data(), v.data(), (int)n, n_pq ? pq.data() : nullptr, n_pq);
            },
            py::arg("keys"), py::arg("values"), py::arg("prefill_queries") = py::none(),
            "Index the prompt: keys [n, d], values [n, d], prefill_queries [group, n_prefill, d] or None (needed "
            "by ctkvr and retrieval_attention). The object keeps its own copy of the KV.")
        .def(
            "append",
            [](HeadMethod& h, const py::object& keys_in, const py::object& values_in) {
                const F32Array k = kv_rows(h, keys_in, "append", "keys");
                const F32Array v = kv_rows(h, values_in, "append", "values");
                if (v.shape(0) != k.shape(0))
                    throw py::value_error(where(h, "append") + ": values: expected " + std::to_string(k.shape(0)) +
                                          " rows (as keys), got " + shape_text(v));
                py::gil_scoped_release nogil;
                std::lock_guard<std::mutex> lk(h.mutex());
                h.append(k.data(), v.data(), (int)k.shape(0));
            },
            py::arg("keys"), py::arg("values"),
            "Decode tokens become visible, in order: keys [m, d], values [m, d] (or [d] for one token); "
            "Method::append is called per token.")
        .def(
            "attend",
            [](HeadMethod& h, const py::object& queries_in, const py::object& step_in) {
                const std::string what = where(h, "attend") + ": queries";
                const F32Array q = as_f32(queries_in, what);
                const py::ssize_t g = h.context().group, d = h.context().head_dim;
                check_shape(q, {g, d}, what, "[group=" + std::to_string(g) + ", head_dim=" + std::to_string(d) + "]");
                check_finite(q, what);
                const bool next = step_in.is_none();
                const int given = next ? 0 : step_in.cast<int>();
                AttendResult r;
                {
                    py::gil_scoped_release nogil;
                    std::lock_guard<std::mutex> lk(h.mutex());
                    h.attend(q.data(), next ? h.visible() - h.prompt_len() - 1 : given, r);
                }
                return attend_dict(h, std::move(r));
            },
            py::arg("queries"), py::arg("step") = py::none(),
            "Selection and attention output for decode step `step` (None: next_step): queries [group, d]. "
            "Returns a dict: out [group, d] float32, lse [group] float64, n_visible, exact_tokens [group], "
            "exact_frac [group], exact_ids (list of group int32 arrays), exact_log_weight (None or list), "
            "est_clusters, est_tokens, est_frac, scan_ops (inner products; a run records scan_ops / n_visible), h2d_bytes "
            "and d2h_bytes (the method's own figures; no GPU block cache), fetch_bytes (= h2d_bytes, a run's "
            "fetch_bytes), fetch_tokens (KV tokens asked from CPU memory).")
        .def(
            "clone",
            [](HeadMethod& h, const py::object& params) -> py::object {
                const nlohmann::json p = to_json(params, "params of method '" + h.method() + "'");
                std::unique_ptr<HeadMethod> c;
                {
                    py::gil_scoped_release nogil;
                    std::lock_guard<std::mutex> lk(h.mutex());
                    c = h.clone_for(p);
                }
                if (!c) return py::none();
                return py::cast(std::move(c));
            },
            py::arg("params"),
            "A built copy for another point of this method that differs only in search-time parameters "
            "(list-methods marks them; e.g. a budget k): the index is shared by copying, not rebuilt, and the "
            "copy behaves as a new HeadMethod(params) built on the same prompt. Call before any append(). None "
            "when the method cannot share its build (build a new HeadMethod). ValueError when a build "
            "parameter differs.")
        .def(
            "footprint",
            [](HeadMethod& h) {
                Footprint f;
                {
                    py::gil_scoped_release nogil;
                    std::lock_guard<std::mutex> lk(h.mutex());
                    f = h.footprint();
                }
                py::dict d;
                d["gpu_bytes"] = f.gpu_bytes;
                d["cpu_bytes"] = f.cpu_bytes;
                return d;
            },
            "Memory the method keeps for this head: {gpu_bytes, cpu_bytes}.");
}

}  // namespace retro::pyb
