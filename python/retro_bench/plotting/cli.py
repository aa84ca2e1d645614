"""python -m retro_bench.plotting plot|report|list RESULTS_DIR ... (called by `retro-bench plot` and `retro-bench report`)."""
import argparse
import json
import os
import sys

from . import figures as F
from ..atomic import write_text
from .figure_file import savefig_atomic
from .results import Results, ResultsError

PROG = "retro-bench"
FORMATS = ("png", "pdf", "svg")


class UsageError(Exception):
    pass


def _err(cmd, msg):
    print(f"{PROG} {cmd}: error: {msg}", file=sys.stderr)
    return 2


def require_matplotlib():
    try:
        import matplotlib  # noqa: F401
        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        raise UsageError(
            f"matplotlib is not available to {sys.executable} ({e}); install it with `bash scripts/setup.sh` "
            "(Debian package python3-matplotlib) or set RETRO_PYTHON to a Python that has it") from e


def load(args):
    for f in args.inspect or []:
        if not os.path.isfile(f):
            raise UsageError(f"--inspect {f}: no such file")
    for d in args.results[1:]:
        if os.path.realpath(d) == os.path.realpath(args.results[0]):
            raise UsageError(f"{d} is given twice")
    res = Results(args.results[0], extra_files=args.inspect or [], others=args.results[1:])
    res.options = {"heatmap_runs": args.heatmap_run or []}
    return res


def select(args):
    if not args.only:
        return list(F.FIGURES.values())
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in F.FIGURES]
    if unknown:
        raise UsageError(f"--only: unknown figure(s) {', '.join(unknown)} (known: {', '.join(F.FIGURES)})")
    return [F.FIGURES[n] for n in names]


def build(res, figs):
    """[(Figure, series or None)] in registry order."""
    return [(f, f.data(res)) for f in figs]


def cmd_plot(args):
    fmts = [x.strip().lower() for x in args.format.split(",") if x.strip()]
    bad = [x for x in fmts if x not in FORMATS]
    if bad or not fmts:
        raise UsageError(f"--format: unknown format(s) {', '.join(bad) or '(none)'} (use {', '.join(FORMATS)})")
    res = load(args)
    require_matplotlib()
    out = args.out or os.path.join(res.path, "figures")
    os.makedirs(out, exist_ok=True)
    index = {"results": res.path, "made": [], "skipped": []}
    for f, series in build(res, select(args)):
        if series is None:
            print(f"skip {f.name}: needs {f.needs}", file=sys.stderr)
            index["skipped"].append({"name": f.name, "needs": f.needs})
            continue
        fig = F.render(f, series)
        files = []
        for fmt in fmts:
            p = os.path.join(out, f"{f.name}.{fmt}")
            savefig_atomic(fig, p, fmt, dpi=args.dpi)
            files.append(p)
        dp = os.path.join(out, f"{f.name}.json")
        write_text(dp, json.dumps({"figure": f.name, "title": f.title, "paper": f.paper,
                            "series": series}, indent=1, default=str) + "\n")
        index["made"].append({"name": f.name, "title": f.title, "paper": f.paper,
                              "files": [os.path.basename(x) for x in files + [dp]]})
        print(f"wrote {f.name}: " + ", ".join(files), file=sys.stderr)
    write_text(os.path.join(out, "index.json"), json.dumps(index, indent=1) + "\n")
    print(f"{len(index['made'])} figure(s) in {out}, {len(index['skipped'])} skipped (no data)")
    return 0


def cmd_report(args):
    from .report import make_report
    res = load(args)
    require_matplotlib()
    out = args.out or os.path.join(res.path, "report.html")
    html = make_report(res, build(res, select(args)))
    write_text(out, html)
    print(f"wrote {out}")
    return 0


def cmd_list(args):
    res = load(args)
    for f, series in build(res, select(args)):
        print(f"{'yes' if series is not None else 'no ':<4}{f.name:<18} {f.title}"
              + ("" if series is not None else f"  [needs {f.needs}]"))
    return 0


def parser():
    p = argparse.ArgumentParser(prog="python -m retro_bench.plotting", description="Figures and reports for retro-bench results")
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp):
        sp.add_argument("results", nargs="+",
                        help="results directory (results/<name>/); more directories after it add their closed-loop "
                             "runs (other models, other contexts) to the closed-loop figures and tables, and the "
                             "output goes to the first")
        sp.add_argument("--inspect", action="append", metavar="FILE",
                        help="a `retro-bench inspect --json` file for the sparsity heatmap (repeatable)")
        sp.add_argument("--heatmap-run", action="append", metavar="RUN_ID",
                        help="run(s) for the per-head heatmap (default: one per method near the median budget)")
        sp.add_argument("--only", metavar="NAMES", help="comma-separated figure names")
    sp = sub.add_parser("plot", help="write every figure that applies as PNG/PDF")
    common(sp)
    sp.add_argument("--out", help="output folder (default RESULTS/figures)")
    sp.add_argument("--format", default="png,pdf", help="comma-separated: png, pdf, svg (default png,pdf)")
    sp.add_argument("--dpi", type=int, default=300, help="PNG resolution (default 300)")
    sp = sub.add_parser("report", help="write one self-contained HTML report")
    common(sp)
    sp.add_argument("--out", help="output file (default RESULTS/report.html)")
    sp = sub.add_parser("list", help="which figures apply to a results directory")
    common(sp)
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        return {"plot": cmd_plot, "report": cmd_report, "list": cmd_list}[args.cmd](args)
    except (ResultsError, UsageError) as e:
        return _err(args.cmd, str(e))
    except KeyboardInterrupt:
        return 130
