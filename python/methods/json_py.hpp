#pragma once
// Python objects <-> JSON, for method parameters and the registry: dict/list/str/bool/int/float/None
// (NumPy scalars included). Python's int vs float survives the trip as JSON's integer vs number, so a
// parameter dict resolves (and seeds, bench/head_run method_seed) exactly as the same JSON config does.
#include <pybind11/pybind11.h>

#include <nlohmann/json.hpp>
#include <string>

namespace retro::pyb {

namespace py = pybind11;

/// Throws TypeError naming `what` for an object that has no JSON form.
nlohmann::json to_json(const py::handle& obj, const std::string& what);

py::object from_json(const nlohmann::json& j);

}  // namespace retro::pyb
