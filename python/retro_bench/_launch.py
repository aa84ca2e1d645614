"""Runs a module of this package with the package imported from this very directory:

    python -B .../retro_bench/_launch.py retro_bench.closedloop.closed_loop ARGS...

retro-bench starts its Python children this way (apps/retro-bench/spawn.hpp): the interpreter may be
another environment's (the dump venv's torch, Debian's matplotlib) and nothing is put on its PYTHONPATH,
so neither shadows the other's packages. A module started this way starts its own children the same way
(retro_bench.launch_command)."""
import importlib.util
import os
import runpy
import sys


def load_package(pkg_dir):
    """Imports retro_bench from pkg_dir (no-op when already imported)."""
    if "retro_bench" in sys.modules:
        return sys.modules["retro_bench"]
    spec = importlib.util.spec_from_file_location("retro_bench", os.path.join(pkg_dir, "__init__.py"),
                                                  submodule_search_locations=[pkg_dir])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["retro_bench"] = mod
    spec.loader.exec_module(mod)
    return mod


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    # the script's directory is sys.path[0]: the package's own modules (atomic, lifeline) must not be
    # importable as top-level names
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        sys.path.pop(0)
    if len(sys.argv) < 2 or not sys.argv[1].startswith("retro_bench."):
        sys.exit(f"usage: python {sys.argv[0]} retro_bench.MODULE [ARGS...]")
    load_package(here)
    module = sys.argv[1]
    del sys.argv[1]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def launch_command(module, python=None):
    """The argument vector that runs `module` of this package as _launch.py's main does (e.g. the closed
    loop's trace dumps: launch_command("retro_bench.dump.dump_trace") + args)."""
    return [python or sys.executable, "-B", os.path.abspath(__file__), module]
