#include "py_adapter.hpp"

#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/interrupted.hpp"
#include "json_py.hpp"
#include "py_arrays.hpp"
#include "py_interrupt.hpp"
#include "py_selection.hpp"

namespace retro::pym {
namespace {

const char* storage_name(DType t) {
    switch (t) {
        case DType::f16: return "f16";
        case DType::bf16: return "bf16";
        default: return "f32";
    }
}

/// Takes the GIL. A thread Python does not know (a runner worker) keeps the thread state it gets for the
/// thread's life (inc_ref): pybind11 otherwise creates and deletes one per call, which cost ~150 us a
/// select (a 16K-token streaming step: 164 us through the runner vs 8 us of Python; docs/performance.md).
class Gil {
  public:
    Gil() : foreign_(PyGILState_GetThisThreadState() == nullptr) {
        if (foreign_) acquire_.inc_ref();
    }

  private:
    bool foreign_;  // before acquire_: decided before the GIL is taken
    py::gil_scoped_acquire acquire_;
};

class PyMethod final : public Method {
  public:
    PyMethod(const PyMethodClass& c, nlohmann::json params) : c_(c), params_(std::move(params)) {}

    ~PyMethod() override {
        if (!obj_) return;
        Gil gil;  // the instance's last reference goes with the GIL held
        obj_ = py::object();
    }

    /// build(ctx, keys [prompt_len, d], values [prompt_len, d], prefill_queries [group, n_prefill, d] | None)
    void build(const MethodContext& ctx, const KVView& prompt) override {
        ctx_ = ctx;
        Gil gil;
        call("__init__", -1, [&] { obj_ = c_.cls(pyb::from_json(params_)); });
        const HeadSlice* s = ctx.slice;
        const py::object keys = readonly_view(prompt.keys, {prompt.n, prompt.d});
        const py::object values = readonly_view(prompt.values, {prompt.n, prompt.d});
        const py::object pq = s && s->num_prefill > 0
                                  ? py::object(readonly_view(s->prefill_queries.data(),
                                                             {s->group, s->num_prefill, s->head_dim}))
                                  : py::object(py::none());
        call("build", -1, [&] { obj_.attr("build")(context(), keys, values, pq); });
        released("build", -1, keys, "keys");
        released("build", -1, values, "values");
        if (!pq.is_none()) released("build", -1, pq, "prefill_queries");
    }

    /// append(kv, pos): kv.keys, kv.values [pos + 1, d]
    void append(const KVView& kv, int pos) override {
        if (!c_.has_append) return;  // no GIL for a method without append
        Gil gil;
        const int step = pos - ctx_.prompt_len;
        KvArgs a = kv_args(kv);
        call("append", step, [&] { obj_.attr("append")(a.ns, pos); });
        released("append", step, a);
    }

    /// select(queries [group, d], step, kv) -> ids or dict (python/methods/py_selection.hpp)
    void select(const float* queries, int step, const KVView& kv, Selection& out) override {
        step_ = step;
        Gil gil;
        const py::object q = readonly_view(queries, {ctx_.group, kv.d});
        KvArgs a = kv_args(kv);
        py::object r;
        call("select", step, [&] { r = obj_.attr("select")(q, step, a.ns); });
        try {
            to_selection(r, ctx_.group, kv.d, kv.n, out, store_);
        } catch (const BadReturn& e) {
            fail("select", step, std::string("returned an invalid selection: ") + e.what());
        } catch (const py::error_already_set& e) {
            fail("select", step, std::string("returned a value that cannot be read: ") + e.what());
        }
        r = py::object();
        released("select", step, q, "queries");
        released("select", step, a);
    }

    /// footprint() -> {"gpu_bytes", "cpu_bytes"} (either may be left out: 0)
    Footprint footprint() const override {
        if (!c_.has_footprint || !obj_) return {};
        Gil gil;
        Footprint f;
        call("footprint", step_, [&] {
            const py::object r = obj_.attr("footprint")();
            if (!py::isinstance<py::dict>(r))
                fail("footprint", step_, "returned " + std::string(py::str(py::type::of(r).attr("__name__"))) +
                                             "; expected a dict {gpu_bytes, cpu_bytes}");
            const py::dict d = py::reinterpret_borrow<py::dict>(r);
            for (const auto& item : d) {
                const std::string k = py::str(item.first);
                if (k != "gpu_bytes" && k != "cpu_bytes")
                    fail("footprint", step_, "unknown key '" + k + "' (keys: gpu_bytes, cpu_bytes)");
                const double x = py::cast<double>(item.second);
                if (!std::isfinite(x) || x < 0) fail("footprint", step_, k + " must be a finite number >= 0");
                (k == "gpu_bytes" ? f.gpu_bytes : f.cpu_bytes) = x;
            }
        });
        return f;
    }

  private:
    /// "py:FILE:Class (layer L, KV head H, step S)".
    std::string who(int step) const {
        std::string s = c_.name + " (layer " + std::to_string(ctx_.layer) + ", KV head " + std::to_string(ctx_.kv_head);
        if (step >= 0) s += ", step " + std::to_string(step);
        return s + ")";
    }

    [[noreturn]] void fail(const char* fn, int step, const std::string& what) const {
        throw Error("Python method " + who(step) + ": " + fn + " " + what);
    }

    /// Runs f; a Python exception becomes an Error naming the method, the call and where; a stop request
    /// during the call (py_interrupt.hpp) becomes Interrupted.
    template <class F>
    void call(const char* fn, int step, F&& f) const {
        InterruptibleCall in_call;
        const auto stopped = [&] {
            return Interrupted("Python method " + who(step) + ": " + fn + " stopped by a stop request (Ctrl-C, SIGTERM)");
        };
        try {
            f();
        } catch (const py::error_already_set& e) {
            if (in_call.interrupted() || e.matches(PyExc_KeyboardInterrupt)) throw stopped();
            fail(fn, step, std::string("raised ") + e.what());
        } catch (const py::cast_error& e) {
            fail(fn, step, std::string("returned a value of the wrong type: ") + e.what());
        }
        if (in_call.interrupted()) throw stopped();  // it returned before the exception was raised
    }

    /// The context as a Python object (types.SimpleNamespace): the MethodContext's fields.
    py::object context() const {
        py::dict d;
        d["layer"] = ctx_.layer;
        d["kv_head"] = ctx_.kv_head;
        d["head_dim"] = ctx_.head_dim;
        d["group"] = ctx_.group;
        d["prompt_len"] = ctx_.prompt_len;
        d["scale"] = ctx_.scale;
        d["storage"] = storage_name(ctx_.storage);
        d["kv_token_bytes"] = ctx_.kv_token_bytes();
        d["seed"] = ctx_.seed;
        return c_.namespace_type(**d);
    }

    /// kv: kv.keys, kv.values [n, d] (read-only views), kv.n, kv.d.
    struct KvArgs {
        py::object keys, values, ns;
    };
    KvArgs kv_args(const KVView& kv) const {
        KvArgs a{readonly_view(kv.keys, {kv.n, kv.d}), readonly_view(kv.values, {kv.n, kv.d}), {}};
        a.ns = c_.namespace_type(py::arg("keys") = a.keys, py::arg("values") = a.values, py::arg("n") = kv.n,
                                 py::arg("d") = kv.d);
        return a;
    }

    void released(const char* fn, int step, const py::object& obj, const char* name) const {
        const std::string kept = kept_reference(obj, name);
        if (!kept.empty()) fail(fn, step, kept);
    }
    /// The kv object first, then (once it is dropped) the arrays it held.
    void released(const char* fn, int step, KvArgs& a) const {
        released(fn, step, a.ns, "kv");
        a.ns = py::object();
        released(fn, step, a.keys, "kv.keys");
        released(fn, step, a.values, "kv.values");
    }

    const PyMethodClass& c_;
    nlohmann::json params_;
    MethodContext ctx_;
    py::object obj_;
    EstimatedStore store_;
    int step_ = -1;  ///< last selected step (footprint errors name it)
};

}  // namespace

std::unique_ptr<Method> make_py_method(const PyMethodClass& c, const nlohmann::json& params) {
    return std::make_unique<PyMethod>(c, params);
}

}  // namespace retro::pym
