#include "json_py.hpp"

namespace retro::pyb {

nlohmann::json to_json(const py::handle& obj, const std::string& what) {
    if (obj.is_none()) return nullptr;
    // NumPy scalars (np.int64, np.float32, np.bool_) and 0-d arrays: their Python value.
    if (py::hasattr(obj, "dtype") && py::hasattr(obj, "item") && py::hasattr(obj, "ndim") &&
        obj.attr("ndim").cast<int>() == 0)
        return to_json(obj.attr("item")(), what);
    if (py::isinstance<py::bool_>(obj)) return obj.cast<bool>();
    if (py::isinstance<py::int_>(obj)) return obj.cast<long long>();
    if (py::isinstance<py::float_>(obj)) return obj.cast<double>();
    if (py::isinstance<py::str>(obj)) return obj.cast<std::string>();
    if (py::isinstance<py::dict>(obj)) {
        nlohmann::json j = nlohmann::json::object();
        for (auto item : py::reinterpret_borrow<py::dict>(obj)) {
            if (!py::isinstance<py::str>(item.first))
                throw py::type_error(what + ": keys must be strings, got " + std::string(py::repr(item.first)));
            const std::string k = item.first.cast<std::string>();
            j[k] = to_json(item.second, what + "['" + k + "']");
        }
        return j;
    }
    if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
        nlohmann::json j = nlohmann::json::array();
        size_t i = 0;
        for (auto x : obj) j.push_back(to_json(x, what + "[" + std::to_string(i++) + "]"));
        return j;
    }
    throw py::type_error(what + ": cannot be expressed as JSON (got " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))) + ")");
}

py::object from_json(const nlohmann::json& j) {
    switch (j.type()) {
        case nlohmann::json::value_t::null: return py::none();
        case nlohmann::json::value_t::boolean: return py::bool_(j.get<bool>());
        case nlohmann::json::value_t::number_integer: return py::int_(j.get<long long>());
        case nlohmann::json::value_t::number_unsigned: return py::int_(j.get<unsigned long long>());
        case nlohmann::json::value_t::number_float: return py::float_(j.get<double>());
        case nlohmann::json::value_t::string: return py::str(j.get<std::string>());
        case nlohmann::json::value_t::array: {
            py::list l;
            for (const auto& x : j) l.append(from_json(x));
            return l;
        }
        case nlohmann::json::value_t::object: {
            py::dict d;
            for (auto it = j.begin(); it != j.end(); ++it) d[py::str(it.key())] = from_json(it.value());
            return d;
        }
        default: return py::none();
    }
}

}  // namespace retro::pyb
