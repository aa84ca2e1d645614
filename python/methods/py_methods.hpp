#pragma once
// Python methods: a class in a Python file, named in a config as "py:FILE.py:Class", runs through the
// same Method interface as a compiled method (docs/adding-a-method.md has the contract). This header is
// what the programs that host them call: retro-bench (an embedded interpreter, python/embed/) and the
// retro_bench module (the interpreter it was imported into: the closed loop). Nothing in lib/ sees Python;
// the registry learns "py:" names through its resolver hook (lib/methods/params.hpp set_method_resolver).
#include <functional>
#include <string>
#include <vector>

#include "methods/params.hpp"

namespace retro::pym {

/// True for "py:FILE:Class" (FILE and Class non-empty; FILE may hold ':' no more than the name allows:
/// the class is after the last ':').
bool is_python_method_name(const std::string& name);

/// Installs the registry's resolver for "py:" names. `start_interpreter` makes sure an interpreter runs
/// and that this thread may take the GIL (retro-bench: initialize it once and release the GIL; the
/// module: nothing to do). Call once, before any config is parsed.
void install_python_methods(std::function<void()> start_interpreter);

/// Loads "py:FILE:Class" into a MethodInfo (name = the full name, params from the class's declarations,
/// source = {"file", "sha256"}). Throws ConfigError naming the file and class: no such file, the file
/// raises on import, no such class, not a method class, a malformed parameter declaration.
MethodInfo load_python_method(const std::string& name);

/// "py:FILE:Class" for each method class FILE defines (a class of that file with build and select), in
/// file order; each is registered (find_method sees it). For `retro-bench list-methods --py FILE`.
std::vector<std::string> register_python_methods_in(const std::string& file);

}  // namespace retro::pym
