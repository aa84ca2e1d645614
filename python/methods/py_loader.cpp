// "py:FILE:Class" -> a registered MethodInfo: the file is read once, hashed (SHA-256 of the bytes that
// are executed) and run as its own module; the class's parameter declarations become ParamSpecs.
#include <pybind11/eval.h>
#include <pybind11/pybind11.h>

#include <filesystem>
#include <mutex>

#include "core/error.hpp"
#include "json_py.hpp"
#include "py_adapter.hpp"
#include "py_methods.hpp"

namespace retro::pym {
namespace {

namespace py = pybind11;

// Loads a file as a module named after its content hash (a second load of the same bytes reuses it);
// its directory is appended to sys.path so it can import its neighbours.
const char* const kLoaderSource = R"PY(
import hashlib, inspect, os, sys, types

def load(path):
    with open(path, "rb") as f:
        src = f.read()
    sha = hashlib.sha256(src).hexdigest()
    name = "retro_pymethod_" + sha[:16]
    mod = sys.modules.get(name)
    if mod is None:
        mod = types.ModuleType(name)
        mod.__file__ = os.path.abspath(path)
        here = os.path.dirname(mod.__file__)
        if here not in sys.path:
            sys.path.append(here)
        sys.modules[name] = mod
        try:
            exec(compile(src, path, "exec"), mod.__dict__)
        except BaseException:
            del sys.modules[name]
            raise
    return mod, sha

def is_method_class(mod, c):
    return (inspect.isclass(c) and c.__module__ == mod.__name__
            and callable(getattr(c, "build", None)) and callable(getattr(c, "select", None)))

def method_classes(mod):
    return [n for n, c in vars(mod).items() if is_method_class(mod, c)]
)PY";

py::dict& loader() {
    static py::dict* ns = [] {
        auto* d = new py::dict();  // kept for the life of the process, like the classes
        py::exec(kLoaderSource, *d);
        return d;
    }();
    return *ns;
}

std::function<void()>& interpreter_starter() {
    static std::function<void()> f;
    return f;
}
std::mutex load_mutex;  // one load at a time (the GIL alone may be dropped inside exec)

void split_name(const std::string& name, std::string& file, std::string& cls) {
    const size_t last = name.rfind(':');
    file = name.substr(3, last - 3);
    cls = name.substr(last + 1);
}

std::string py_error_text(const py::error_already_set& e) { return e.what(); }

ParamType param_type(const std::string& t, const std::string& where) {
    if (t == "int") return ParamType::integer;
    if (t == "number") return ParamType::number;
    if (t == "bool") return ParamType::boolean;
    if (t == "string") return ParamType::string;
    throw ConfigError(where + ": type '" + t + "' is not one of int|number|bool|string");
}

/// One entry of the class's `params` list: {"name", "type", "default", "description", "source"} and
/// optionally "min", "max" (numbers) or "choices" (strings).
ParamSpec param_spec(const py::handle& entry, const std::string& where) {
    if (!py::isinstance<py::dict>(entry)) throw ConfigError(where + ": expected a dict {name, type, default, ...}");
    const nlohmann::json j = pyb::to_json(entry, where);
    for (auto it = j.begin(); it != j.end(); ++it)
        if (it.key() != "name" && it.key() != "type" && it.key() != "default" && it.key() != "description" &&
            it.key() != "source" && it.key() != "min" && it.key() != "max" && it.key() != "choices")
            throw ConfigError(where + ": unknown key '" + it.key() +
                              "' (keys: name, type, default, description, source, min, max, choices)");
    for (const char* k : {"name", "type", "default", "description", "source"})
        if (!j.contains(k)) throw ConfigError(where + ": missing '" + k + "'");
    for (const char* k : {"name", "type", "description", "source"})
        if (!j[k].is_string()) throw ConfigError(where + ": '" + k + "' must be a string");
    ParamSpec s;
    s.name = j["name"];
    const std::string w = where + " '" + s.name + "'";
    s.type = param_type(j["type"], w);
    s.default_value = j["default"];
    s.description = j["description"];
    s.source = j["source"];
    for (const char* k : {"min", "max"})
        if (j.contains(k)) {
            if (!j[k].is_number()) throw ConfigError(w + ": '" + k + "' must be a number");
            (std::string(k) == "min" ? s.min : s.max) = j[k].get<double>();
        }
    if (j.contains("choices")) {
        if (!j["choices"].is_array()) throw ConfigError(w + ": 'choices' must be a list of strings");
        for (const auto& c : j["choices"]) {
            if (!c.is_string()) throw ConfigError(w + ": 'choices' must be a list of strings");
            s.choices.push_back(c);
        }
    }
    return s;
}

}  // namespace

bool is_python_method_name(const std::string& name) {
    if (name.rfind("py:", 0) != 0) return false;
    const size_t last = name.rfind(':');
    return last > 3 && last + 1 < name.size();
}

MethodInfo load_python_method(const std::string& name) {
    if (!is_python_method_name(name))
        throw ConfigError("method '" + name + "': a Python method is named py:FILE.py:Class");
    std::string file, cls_name;
    split_name(name, file, cls_name);
    const std::string who = "method '" + name + "'";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec))
        throw ConfigError(who + ": no such file " + file + " (relative paths are relative to the working directory)");
    if (interpreter_starter()) interpreter_starter()();
    std::lock_guard<std::mutex> lk(load_mutex);
    py::gil_scoped_acquire gil;
    py::object mod;
    std::string sha;
    try {
        const py::tuple r = loader()["load"](file);
        mod = r[0];
        sha = r[1].cast<std::string>();
    } catch (const py::error_already_set& e) {
        throw ConfigError(who + ": loading " + file + " raised " + py_error_text(e));
    }
    if (!py::hasattr(mod, cls_name.c_str())) {
        std::string known;
        for (const auto& n : loader()["method_classes"](mod)) known += (known.empty() ? "" : ", ") + py::str(n).cast<std::string>();
        throw ConfigError(who + ": " + file + " defines no class '" + cls_name + "' (method classes there: " +
                          (known.empty() ? "none" : known) + ")");
    }
    const py::object cls = mod.attr(cls_name.c_str());
    if (!loader()["is_method_class"](mod, cls).cast<bool>())
        throw ConfigError(who + ": " + cls_name + " is not a method class of " + file +
                          " (a class defined there with build(ctx, keys, values, prefill_queries) and "
                          "select(queries, step, kv) methods)");

    auto* c = new PyMethodClass;  // never freed (py_adapter.hpp)
    c->name = name;
    c->file = file;
    c->cls_name = cls_name;
    c->cls = cls.inc_ref();
    c->namespace_type = py::object(py::module_::import("types").attr("SimpleNamespace")).inc_ref();
    c->has_append = py::hasattr(cls, "append");
    c->has_footprint = py::hasattr(cls, "footprint");

    MethodInfo m;
    m.name = name;
    const py::object doc = cls.attr("__doc__");
    const std::string docline = doc.is_none() ? "" : doc.cast<std::string>().substr(0, doc.cast<std::string>().find('\n'));
    m.description = py::hasattr(cls, "description") ? py::str(cls.attr("description")).cast<std::string>()
                                                     : (docline.empty() ? "Python method " + cls_name : docline);
    m.paper = py::hasattr(cls, "paper") ? py::str(cls.attr("paper")).cast<std::string>() : "-";
    if (py::hasattr(cls, "params")) {
        const py::object ps = cls.attr("params");
        if (!py::isinstance<py::list>(ps) && !py::isinstance<py::tuple>(ps))
            throw ConfigError(who + ": " + cls_name + ".params must be a list of dicts {name, type, default, "
                              "description, source, [min, max | choices]}");
        size_t i = 0;
        for (const auto& e : ps) m.params.push_back(param_spec(e, who + ": params[" + std::to_string(i++) + "]"));
    }
    m.source = {{"file", file}, {"sha256", sha}};
    m.make = [c](const nlohmann::json& p) { return make_py_method(*c, p); };
    // The declared defaults must themselves be valid: a bad declaration fails at load, not at a run.
    resolve_params(m, nlohmann::json::object());
    return m;
}

void install_python_methods(std::function<void()> start_interpreter) {
    interpreter_starter() = std::move(start_interpreter);
    set_method_resolver([](const std::string& name) {
        if (!is_python_method_name(name)) return false;
        register_method(load_python_method(name));
        return true;
    });
}

std::vector<std::string> register_python_methods_in(const std::string& file) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) throw ConfigError("no such file " + file);
    if (interpreter_starter()) interpreter_starter()();
    std::vector<std::string> names;
    {
        std::lock_guard<std::mutex> lk(load_mutex);
        py::gil_scoped_acquire gil;
        try {
            const py::tuple r = loader()["load"](file);
            for (const auto& n : loader()["method_classes"](r[0])) names.push_back("py:" + file + ":" + py::str(n).cast<std::string>());
        } catch (const py::error_already_set& e) {
            throw ConfigError("loading " + file + " raised " + py_error_text(e));
        }
    }
    for (const auto& n : names) find_method(n);  // registers it
    return names;
}

}  // namespace retro::pym
