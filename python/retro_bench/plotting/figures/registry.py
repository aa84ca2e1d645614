"""The figure registry: every figure of `retro-bench plot` and `report`, in the order they are shown.

Each figure is one data function and one draw function, defined together in its family's module
(accuracy, ood, wave_sweeps, build_cost, heads, system, gpu, ...) and registered there:

    @figure("name", title=..., needs=..., size=(w, h))
    def name(res):            # Results -> JSON-able series dict, or None when the results lack the data
        ...
    @drawer("name")
    def _draw_name(s, fig):   # series dict -> axes on a matplotlib Figure (no data access here)
        ...

`h` may be a function of the series (figures whose height grows with their data), or `size` a function of
the series giving (w, h) (figures whose panel grid follows their data). A figure applies to a
results directory exactly when its data function returns a dict. Data functions are pure Python (no
matplotlib), so tests check which series and points each figure shows; the `plot` command also writes
each figure's series next to it (figures/<name>.json).

ORDER below is the one list of every figure: a figure module registering a name missing from it, or a
name without a module, fails at import (figures/__init__.py calls `finish`).
"""
from collections import OrderedDict

from .. import style

ORDER = (
    "accuracy_budget", "ood_recall", "zone_sweeps", "estimation", "segments", "updates", "head_heatmap",
    "sparsity_heatmap", "recall_scanned", "build_time", "scale", "cache", "throughput", "gpu_step_time",
    "gpu_phases", "gpu_speedup", "centroid_rank", "closed_loop_kl", "closed_loop_top1", "closed_loop_accuracy",
    "offline_online",
)


class Figure:
    def __init__(self, name, title, needs, data, size, paper=""):
        self.name, self.title, self.needs, self.data, self.size, self.paper = name, title, needs, data, size, paper
        self.draw = None

    def applies(self, res):
        return self.data(res) is not None


FIGURES = OrderedDict()


def figure(name, title, needs, size=(style.COLUMN_W, 1.7), paper=""):
    def deco(fn):
        if name in FIGURES:
            raise RuntimeError(f"figure {name!r} registered twice")
        FIGURES[name] = Figure(name, title, needs, fn, size, paper)
        return fn
    return deco


def drawer(name):
    def deco(fn):
        FIGURES[name].draw = fn
        return fn
    return deco


def finish():
    """Puts FIGURES in ORDER and checks that ORDER and the registered figures agree, each with a drawer."""
    missing = [n for n in ORDER if n not in FIGURES]
    unlisted = [n for n in FIGURES if n not in ORDER]
    undrawn = [n for n, f in FIGURES.items() if f.draw is None]
    if missing or unlisted or undrawn:
        raise RuntimeError(f"figure registry: not registered {missing}, not in ORDER {unlisted}, "
                           f"no drawer {undrawn}")
    for n in ORDER:
        FIGURES.move_to_end(n)


def figure_size(fig_def, series):
    if callable(fig_def.size):  # (w, h) from the series (panels per model and context)
        return fig_def.size(series)
    w, h = fig_def.size
    if callable(h):
        h = h(series)
    return w, h


def render(fig_def, series):
    """A matplotlib Figure drawn from `series` (matplotlib must be importable)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: F401  (registers the Agg canvas)
    from matplotlib.figure import Figure as MplFigure
    style.apply_rc()
    fig = MplFigure(figsize=figure_size(fig_def, series))
    fig_def.draw(series, fig)
    return fig
