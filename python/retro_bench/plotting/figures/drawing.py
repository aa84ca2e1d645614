"""Helpers shared by the draw functions (matplotlib imported by the caller; nothing here reads results)."""
import math

from .. import style


def mantissa(v):
    return round(v / 10 ** math.floor(math.log10(v) + 1e-9)) if v > 0 else 0


def pct_axis(ax, axis="x", log=True):
    """Plain-number tick labels (0.1, 1, 10); on a log axis spanning less than two decades the 2 and 5
    minor ticks are labelled too. Call after plotting (reads the data limits)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    a = ax.xaxis if axis == "x" else ax.yaxis
    if log:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        a.set_major_locator(LogLocator(base=10, numticks=12))
        lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
        import matplotlib as mpl
        # minor ticks are shorter: pad their labels so they line up with the major ones
        k = "xtick" if axis == "x" else "ytick"
        ax.tick_params(axis=axis, which="minor", pad=mpl.rcParams[f"{k}.major.pad"] +
                       mpl.rcParams[f"{k}.major.size"] - mpl.rcParams[f"{k}.minor.size"])
        if lo > 0 and hi / lo < 10:  # under a decade: label every minor tick (2, 3, 4, ...)
            a.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:.2g}"))
        elif lo > 0 and hi / lo < 100:
            a.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if mantissa(v) in (2, 5) else ""))
        else:
            a.set_minor_formatter(NullFormatter())
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def legend_above(fig, handles, labels, ncol=None, y=1.0):
    if not handles:
        return
    ncol = ncol or min(len(handles), 4)
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, y), ncol=ncol, frameon=False,
               borderaxespad=0.0)


def variant_style(i):
    """Within one method: variants keep the colour and marker; line style and fill tell them apart."""
    ls = ["-", "--", ":", "-."][i % 4]
    filled = i % 2 == 0
    return ls, filled


def method_line(ax, xs, ys, method, label=None, variant=0, **kw):
    st = style.method_style(method)
    ls, filled = variant_style(variant)
    return ax.plot(xs, ys, ls, color=st["color"], marker=st["marker"], label=label or st["name"],
                   markerfacecolor=st["color"] if filled else "white", markeredgecolor=st["color"],
                   markeredgewidth=0.8, **kw)[0]


def ylim_metric(ax, met, values):
    vals = [v for v in values if v is not None]
    if met.startswith("recall@") or met in ("mass", "out_cos"):
        lo = min(vals) if vals else 0
        ax.set_ylim(max(0.0, min(lo - 0.05, 0.0 if lo < 0.3 else lo - 0.1)), 1.02)
    elif met == "out_err":
        hi = max(vals) if vals else 1
        ax.set_ylim(0, hi * 1.08 if hi > 0 else 1)
