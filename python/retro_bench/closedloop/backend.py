"""The attention backend of the closed loop: the compiled core of this package (retro_bench._core, built
into build/python/retro_bench/, docs/python.md). The closed loop runs from the package, so the package is
already imported; what can be missing is its core (the source tree has none).

Every method, `full` included, runs through rb.HeadMethod: one object per (layer, KV head) that owns a
copy of the prompt's keys/values (build), grows with each decode token (append) and answers a step's
GQA group of queries (attend) exactly as the open-loop evaluator computes it."""

import retro_bench


class BackendError(Exception):
    pass


def load():
    """The retro_bench package with its core loaded; BackendError naming where it was looked for when the
    core is missing."""
    try:
        retro_bench.core()
    except ImportError as e:
        raise BackendError(str(e)) from None
    return retro_bench
