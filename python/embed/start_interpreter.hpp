#pragma once
// retro-bench with an embedded interpreter (python/CMakeLists.txt: when libpython is found).
#include <functional>
#include <string>

namespace retro::pym {

/// Lets configs name Python methods ("py:FILE:Class"): installs the registry's resolver with an
/// interpreter started on first use. Call once at program start. package_dir: called once when the
/// interpreter starts, it names the retro_bench package's directory (or "" when none is found); its
/// parent becomes a site directory, so a method's `from retro_bench import Method` finds the package (and,
/// in a wheel's venv, its site-packages: NumPy) while the compiled core is never loaded here.
void install_embedded_python_methods(std::function<std::string()> package_dir);

}  // namespace retro::pym
