"""The attention backend of the closed loop: the Python binding of the C++ core (module `retro_bench`,
built into build/python/, docs/python.md). `retro-bench run` puts build/python on PYTHONPATH; run by
hand, set PYTHONPATH yourself or RETRO_PYTHONPATH (checked first).

Every method, `full` included, runs through rb.HeadMethod: one object per (layer, KV head) that owns a
copy of the prompt's keys/values (build), grows with each decode token (append) and answers a step's
GQA group of queries (attend) exactly as the open-loop evaluator computes it."""

import os
import sys


class BackendError(Exception):
    pass


def load():
    """The retro_bench module; BackendError naming where it was looked for when it is missing."""
    extra = os.environ.get("RETRO_PYTHONPATH")
    if extra:
        for p in reversed(extra.split(os.pathsep)):
            if p and p not in sys.path:
                sys.path.insert(0, p)
    try:
        import retro_bench
    except ImportError as e:
        raise BackendError(f"cannot import the retro_bench binding ({e}); build the project "
                           "(scripts/env.sh; retro_build) and put build/python on PYTHONPATH")
    return retro_bench
