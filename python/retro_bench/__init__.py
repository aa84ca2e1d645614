"""retro-bench in Python (docs/python.md): one package.

    retro_bench            the C++ core (method registry, trace reader, methods, HeadMethod, the evaluator's
                           attention), compiled as retro_bench._core and loaded on first use of one of
                           its names: `retro_bench.list_methods()`, `retro_bench.HeadMethod(...)`
    retro_bench.Method     the base class of a method written in Python, with declared parameters (Param)
    retro_bench.closedloop every method inside a real model's decode (docs/closed-loop.md)
    retro_bench.plotting   figures and the HTML report of a results directory (docs/plots.md)
    retro_bench.dump       the trace dumper and the model/text sources it reads (docs/traces.md)
    retro_bench.atomic     files written whole or not at all

The core loads lazily so that the pure-Python parts import under any interpreter (the plotting under
Debian's Python with matplotlib, a Python method inside retro-bench's embedded interpreter) without the
compiled module of another Python's ABI; a missing core is an ImportError naming where it was looked for
at the first use of a core name.
"""
from ._launch import launch_command
from .method import Method, Param

__all__ = ["Method", "Param", "launch_command", "core"]

_core = None


def core():
    """The compiled module retro_bench._core (ImportError naming the package directory when it is absent:
    the source tree has none; build/python/retro_bench and a wheel do)."""
    global _core
    if _core is None:
        import importlib
        import os
        try:
            mod = importlib.import_module("._core", __name__)
        except ImportError as e:
            raise ImportError(
                f"retro_bench's compiled core is not importable from {os.path.dirname(__file__)} ({e}): build the "
                "project (source scripts/env.sh; retro_build) and put build/python on PYTHONPATH, or pip install .") from e
        for name in dir(mod):  # the core's classes and functions say they are retro_bench's (reprs, pickling)
            obj = getattr(mod, name)
            if getattr(obj, "__module__", None) == mod.__name__:
                try:
                    obj.__module__ = __name__
                except (AttributeError, TypeError):
                    pass
        _core = mod
    return _core


def __getattr__(name):  # PEP 562: the core's names, loaded on first use
    if (name.startswith("__") and name != "__version__") or _is_submodule(name):
        raise AttributeError(name)  # `from retro_bench import lifeline`: the import system then imports it
    try:
        return getattr(core(), name)
    except AttributeError:
        raise AttributeError(f"module 'retro_bench' has no attribute '{name}'") from None


def _is_submodule(name):
    import os
    here = os.path.dirname(__file__)
    return os.path.isfile(os.path.join(here, name + ".py")) or os.path.isdir(os.path.join(here, name))


def __dir__():
    import os
    here = os.path.dirname(__file__)
    subs = {os.path.splitext(e)[0] for e in os.listdir(here) if not e.startswith("_")}
    names = set(globals()) | {n for n in subs if _is_submodule(n)}
    try:
        names |= {n for n in dir(core()) if not n.startswith("_")}
    except ImportError:
        pass
    return sorted(names)
