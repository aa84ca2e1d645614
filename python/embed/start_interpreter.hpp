#pragma once
// retro-bench with an embedded interpreter (python/CMakeLists.txt: when libpython is found).
namespace retro::pym {

/// Lets configs name Python methods ("py:FILE:Class"): installs the registry's resolver with an
/// interpreter started on first use. Call once at program start.
void install_embedded_python_methods();

}  // namespace retro::pym
