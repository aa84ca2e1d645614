"""One self-contained HTML page per results directory: figures (base64 PNG), the run table, the best
configuration per method in each exact-token budget bin, and the manifest (config, revision, host, BLAS).
A closed-loop directory (docs/closed-loop.md) also gets its own run table (fidelity, NIAH accuracy, time)
and the offline-vs-online Spearman table of its offline-online.json; with more directories given
(`retro-bench report DIR OTHER...`) the closed-loop runs of all of them, a model column when they differ."""
import base64
import datetime
import html
import io
import json
import math
import os

from . import closed as C
from . import figures as F
from . import style
from .results import metric

# exact_frac bin edges (fractions of the visible tokens)
BUDGET_EDGES = (0.0, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;
 padding:1.2em 2em;color:#222;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:1.8em}
h3{font-size:1em;margin-bottom:.3em}
nav a{margin-right:1em} .meta{color:#555;font-size:.9em}
figure{display:inline-block;vertical-align:top;margin:.8em 1.2em .8em 0;max-width:100%}
figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.85em;color:#333;max-width:60em}
table{border-collapse:collapse;font-size:.82em;margin:.4em 0 1em}
th,td{border:1px solid #d8d8d8;padding:2px 6px;text-align:right;white-space:nowrap}
th{background:#f2f2f2;position:sticky;top:0} td.l,th.l{text-align:left}
tr:nth-child(even) td{background:#fafafa}
pre{background:#f7f7f7;border:1px solid #e3e3e3;padding:.6em;overflow:auto;font-size:.8em;max-height:40em}
.swatch{display:inline-block;width:.8em;height:.8em;border-radius:50%;margin-right:.3em;vertical-align:-.05em}
.skipped{color:#666;font-size:.85em} .scroll{overflow-x:auto;max-width:100%}
"""


def esc(x):
    return html.escape("" if x is None else str(x), quote=True)


def fmt_num(x, digits=4):
    if x is None:
        return "–"
    if isinstance(x, float) and not math.isfinite(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    if abs(x) >= 10 ** digits:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def table(headers, rows, cls="", tid="", left=()):
    """headers: list of str; rows: list of list of (already escaped) cell html."""
    h = "".join(f'<th class="l">{esc(c)}</th>' if i in left else f"<th>{esc(c)}</th>"
                for i, c in enumerate(headers))
    body = "".join("<tr>" + "".join(f'<td class="l">{c}</td>' if i in left else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    ida = f' id="{tid}"' if tid else ""
    return f'<table class="{cls}"{ida}><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>'


def method_cell(m):
    st = style.method_style(m)
    return f'<span class="swatch" style="background:{st["color"]}"></span>{esc(m)}'


# ---- run table ----
RUN_COLUMNS = [  # (header, metric, stat, scale)
    ("exact %", "exact_frac", "mean", 100), ("est %", "est_frac", "mean", 100),
    ("recall@10", "recall@10", "mean", 1), ("recall@100", "recall@100", "mean", 1),
    ("recall@1000", "recall@1000", "mean", 1), ("mass", "mass", "mean", 1),
    ("out_err", "out_err", "mean", 1), ("out_err p90", "out_err", "p90", 1), ("out_cos", "out_cos", "mean", 1),
    ("lse_err", "lse_err", "mean", 1), ("scan %", "scan_ops", "mean", 100),
    ("h2d KiB/step", "h2d_bytes", "mean", 1 / 1024), ("GPU MiB", "gpu_bytes", "mean", 1 / 2 ** 20),
    ("select µs p50", "select_us", "p50", 1), ("attend µs p50", "attend_us", "p50", 1),
    ("build ms", "build_ms", "mean", 1),
    ("GPU step µs", "gpu_step_us", "mean", 1), ("model step µs", "model_step_us", "mean", 1),  # backend "cuda"
]


def runs_table(res):
    cols = [c for c in RUN_COLUMNS if any(metric(r, c[1], c[2]) is not None for r in res.runs)]
    rows = []
    for i, r in enumerate(res.runs):
        cells = [str(i), method_cell(r.get("method")), esc(res.short_label(r, False))]
        for _, m, stat, sc in cols:
            v = metric(r, m, stat)
            cells.append(fmt_num(None if v is None else v * sc))
        cells.append(f"<code>{esc(r.get('run_id'))}</code>")
        rows.append(cells)
    return '<div class="scroll">' + table(["#", "method", "params"] + [c[0] for c in cols] + ["run id"], rows,
                                           "runs", "runs-table", left=(1, 2, 3 + len(cols))) + "</div>"


def bin_label(lo, hi):
    return f"{100 * lo:g}–{100 * hi:g}%"


def best_per_budget(res):
    """[{bin, method, by_err: run, by_recall: run}] for every (exact_frac bin, method) with runs."""
    rk = res.recall_metric(100)
    out = []
    for lo, hi in zip(BUDGET_EDGES, BUDGET_EDGES[1:]):
        for m in res.methods():
            rs = [r for r in res.runs_of(m) if metric(r, "exact_frac") is not None
                  and (lo < metric(r, "exact_frac") <= hi or (lo == 0 and metric(r, "exact_frac") == 0))]
            if not rs:
                continue
            with_err = [r for r in rs if metric(r, "out_err") is not None]
            with_rec = [r for r in rs if rk and metric(r, rk) is not None]
            by_err = min(with_err, key=lambda r: (metric(r, "out_err"), metric(r, "exact_frac"))) if with_err else None
            by_rec = max(with_rec, key=lambda r: (metric(r, rk), -metric(r, "exact_frac"))) if with_rec else None
            out.append({"bin": (lo, hi), "method": m, "by_err": by_err, "by_recall": by_rec, "n": len(rs)})
    return out, rk


def best_table(res):
    best, rk = best_per_budget(res)
    rows = []
    for b in best:
        e, r = b["by_err"], b["by_recall"]
        cells = [esc(bin_label(*b["bin"])), method_cell(b["method"]), str(b["n"])]
        if e:
            cells += [esc(res.short_label(e, False)), fmt_num(100 * metric(e, "exact_frac")),
                      fmt_num(metric(e, "out_err")), fmt_num(metric(e, rk)) if rk else "–",
                      fmt_num(metric(e, "mass"))]
        else:
            cells += ["–"] * 5
        if r and e and r["run_id"] == e["run_id"]:
            cells += ["(same)", fmt_num(metric(r, rk))]
        elif r:
            cells += [esc(res.short_label(r, False)), fmt_num(metric(r, rk))]
        else:
            cells += ["–", "–"]
        rows.append(cells)
    rkl = rk or "recall"
    return '<div class="scroll">' + table(
        ["exact budget", "method", "runs", "best by out_err: params", "exact %", "out_err", rkl, "mass",
         f"best by {rkl}: params", rkl], rows, "best", "best-table", left=(0, 1, 3, 8)) + "</div>"


# ---- manifest ----
def manifest_html(res):
    m = res.manifest
    if not m:
        return "<p>No manifest.json in this directory.</p>"
    host = m.get("host", {})
    parts = []
    rows = [[esc(k), esc(v)] for k, v in [
        ("name", m.get("name")), ("status", m.get("status")), ("config file", m.get("config_file")),
        ("finished", m.get("finished_at")), ("hardware profile", m.get("hardware_profile")),
        ("git revision", host.get("git_revision")), ("retro-bench version", host.get("version")),
        ("host", host.get("hostname")), ("CPU", host.get("cpu_model")), ("cores", host.get("cpu_cores")),
        ("memory (GB)", host.get("memory_gb")), ("OS", host.get("os")), ("BLAS", host.get("blas")),
        ("instruction sets", ", ".join(host["cpu_flags"]) if isinstance(host.get("cpu_flags"), list) else None),
        ("library versions", ", ".join(f"{k} {v}" for k, v in host["versions"].items())
         if isinstance(host.get("versions"), dict) else None),
        ("CUDA kernels built", host.get("cuda_built"))] if v is not None]
    for k, v in host.items():
        if k not in ("git_revision", "version", "hostname", "cpu_model", "cpu_cores", "memory_gb", "os", "blas",
                     "cuda_built", "cpu_flags", "versions"):
            rows.append([esc(k), esc(json.dumps(v) if isinstance(v, (dict, list)) else v)])
    parts.append(table(["field", "value"], rows, "kv", "manifest-table", left=(0, 1)))
    sess = m.get("sessions", [])
    if sess:
        keys = []
        for s in sess:
            keys += [k for k in s if k not in keys]
        parts.append("<h3>Sessions</h3>" + table(keys, [[esc(s.get(k)) for k in keys] for s in sess],
                                                 "sessions", "sessions-table", left=tuple(range(len(keys)))))
    tr = m.get("traces", [])
    if tr:
        keys = [k for k in ("path", "model", "dtype", "prompt_len", "decode_steps", "layers", "kv_heads")
                if any(k in t for t in tr)]
        rows = [[esc(json.dumps(t.get(k)) if isinstance(t.get(k), list) else t.get(k)) for k in keys]
                + [str(len(t.get("runs", [])))] for t in tr]
        parts.append("<h3>Traces</h3>" + table(keys + ["runs"], rows, "traces", "traces-table", left=(0, 1, 2)))
    mets = m.get("metrics", [])
    if mets:
        rows = [[esc(x.get("name")), esc(x.get("unit")), esc(x.get("direction")), esc(x.get("level")),
                 esc(x.get("description"))] for x in mets]
        parts.append("<h3>Metrics</h3>" + table(["metric", "unit", "direction", "level", "description"], rows,
                                                "metrics", "metrics-table", left=(0, 1, 2, 3, 4)))
    if m.get("config_source") is not None:
        parts.append("<h3>Configuration (as given)</h3><pre id=\"config-source\">"
                     + esc(json.dumps(m["config_source"], indent=2)) + "</pre>")
    if m.get("config") is not None:
        parts.append("<details><summary>Resolved configuration (defaults filled, sweep expanded)</summary>"
                     "<pre id=\"config-resolved\">" + esc(json.dumps(m["config"], indent=2)) + "</pre></details>")
    return "\n".join(parts)


# ---- closed loop (docs/closed-loop.md) ----
CLOSED_COLUMNS = [  # (header, path into the run record, scale)
    ("exact %", ("exact_frac",), 100), ("est %", ("est_frac",), 100),
    ("KL mean", ("fidelity", "kl_mean"), 1), ("KL p90", ("fidelity", "kl_p90"), 1),
    ("top-1", ("fidelity", "top1"), 1), ("ppl", ("fidelity", "ppl"), 1),
    ("NIAH acc", ("task", "accuracy"), 1), ("acc on full-correct", ("task", "accuracy_on_full_correct"), 1),
    ("agreement", ("task", "agreement_mean"), 1), ("ms/step p50", ("step_ms_median",), 1),
    ("build s", ("build_s_total",), 1),
]


def record_field(run, path):
    """A number inside a run record by its key path (None when absent or not finite)."""
    v = run
    for k in path:
        v = v.get(k) if isinstance(v, dict) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def is_closed_loop(res):
    return C.is_closed_loop(res)


def _spearman_html(oo, title):
    opens = list(dict.fromkeys(t["open"] for t in oo.get("table", [])))
    closeds = list(dict.fromkeys(t["closed"] for t in oo.get("table", [])))
    rho = {(t["open"], t["closed"]): t.get("spearman") for t in oo.get("table", [])}
    srows = [[esc(o)] + [fmt_num(rho.get((o, c)), 3) for c in closeds] for o in opens]
    return (f'<h3>{esc(title)}</h3><p class="meta">Spearman rank correlation over '
            f'{len(oo.get("points", []))} (method, parameters) points: open-loop metric (rows) against '
            "closed-loop metric (columns); offline-online.json.</p>"
            + table(["open-loop \\ closed-loop"] + [esc(c) for c in closeds], srows, "spearman",
                    "spearman-table", left=(0,)))


def _in_progress_values(res):
    """{(results path, run id): record-shaped values} of the runs of grids still running, from the points
    the figures draw (plotting/closed.py: the part files on the cases every run of the grid has done),
    pooled over the run's contexts: accuracy weighted by scored cases, KL and top-1 by positions."""
    pooled = {}
    for pts in C.points(res).values():
        for q in pts:
            if q.get("source") == "parts":
                pooled.setdefault((q["results"], q["run_id"]), []).append(q)

    def mean(qs, key, weight):
        w = [(q[key], q.get(weight) or 0) for q in qs if q.get(key) is not None]
        return sum(v * n for v, n in w) / sum(n for _, n in w) if w and sum(n for _, n in w) > 0 else None

    out = {}
    for k, qs in pooled.items():
        out[k] = {"exact_frac": mean(qs, "exact_frac", "cases"), "cases": sum(q.get("cases") or 0 for q in qs),
                  "fidelity": {"kl_mean": mean(qs, "kl_mean", "positions"), "top1": mean(qs, "top1", "positions")},
                  "task": {"accuracy": mean(qs, "accuracy", "task_cases")}}
    return out


def closed_loop_html(res):
    """The closed-loop runs (the reference first) of every directory given (a model column when there are
    several models) and, per directory with offline-online.json, the Spearman rank correlation of each
    (open-loop, closed-loop) metric pair. A grid still running has no records yet: its runs' exact %, KL,
    top-1 and accuracy come from the part files of the cases all its runs have done, marked partial."""
    dirs = C.directories(res) or [res]
    several = len(C.models(res)) > 1
    partial = _in_progress_values(res) if any(r.get("in_progress") for d in dirs for r in d.runs) else {}
    runs = [(d, dict(r, **partial.get((d.path, r.get("run_id")), {})) if r.get("in_progress") else r)
            for d in dirs for r in d.runs]
    cols = [c for c in CLOSED_COLUMNS if any(record_field(r, c[1]) is not None for _, r in runs)]
    rows = []
    for d, r in runs:
        cells = [esc(C.model_label(C.model_of(d, r)))] if several else []
        cells += [method_cell(r.get("method")), esc(r.get("label") or d.short_label(r, False))]
        cells += [fmt_num(None if record_field(r, p) is None else record_field(r, p) * sc) for _, p, sc in cols]
        if r.get("complete") is False:
            cells[len(cells) - len(cols) - 1] += (f" (partial: {r['cases']} common cases)" if r.get("in_progress")
                                                  and r.get("cases") else " (partial)")
        rows.append(cells)
    head = (["model"] if several else []) + ["method", "run"] + [c[0] for c in cols]
    out = ['<div class="scroll">' + table(head, rows, "closed", "closed-loop-table",
                                          left=(0, 1, 2) if several else (0, 1)) + "</div>"]
    for d in dirs:
        path = os.path.join(d.path, "offline-online.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                oo = json.load(f)
            title = "Offline vs online" + (f" — {C.model_label(C.model_of(d))}" if several else "")
            out.append(_spearman_html(oo, title))
    return "\n".join(out)


def run_host(res):
    """(revision, BLAS, where they come from) for the header: the manifest's host (retro-bench run writes
    git_revision and blas there), else the closed-loop runner's open-loop replay next to it
    (RESULTS/<name>-openloop/manifest.json, made by the same checkout's retro-bench); None when neither says."""
    host = res.manifest.get("host") if isinstance(res.manifest.get("host"), dict) else {}
    rev = host.get("git_revision") or host.get("revision") or res.manifest.get("git_revision")
    blas = host.get("blas")
    if rev and blas:
        return rev, blas, "manifest"
    if C.is_closed_loop(res):
        p = os.path.join(os.path.dirname(res.path), os.path.basename(res.path) + "-openloop", "manifest.json")
        try:
            with open(p, encoding="utf-8") as f:
                oh = json.load(f).get("host") or {}
        except (OSError, ValueError):
            oh = {}
        if (not rev and oh.get("git_revision")) or (not blas and oh.get("blas")):
            return rev or oh.get("git_revision"), blas or oh.get("blas"), "the open-loop replay's manifest"
    return rev, blas, "manifest"


# ---- figures ----
def figure_png(fig_def, series, dpi=200):
    fig = F.render(fig_def, series)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": "retro-bench report (matplotlib)"})
    w, h = fig.get_size_inches()
    return buf.getvalue(), w


def figures_html(built):
    out, skipped = [], []
    for f, series in built:
        if series is None:
            skipped.append(f)
            continue
        png, w = figure_png(f, series)
        b64 = base64.b64encode(png).decode("ascii")
        width = int(round(w * 150))
        cap = f"<b>{esc(f.title)}</b>" + (f" — {esc(f.paper)}" if f.paper else "")
        out.append(f'<figure id="fig-{esc(f.name)}"><img class="fig" alt="{esc(f.title)}" width="{width}" '
                   f'src="data:image/png;base64,{b64}"><figcaption>{cap} '
                   f'<span class="meta">[{esc(f.name)}]</span></figcaption></figure>')
    if skipped:
        out.append('<p class="skipped">Not drawn (the results hold no data for them): '
                   + "; ".join(f"<b>{esc(f.name)}</b> (needs {esc(f.needs)})" for f in skipped) + "</p>")
    return "\n".join(out) if out else "<p>No figure applies to these results.</p>"


def make_report(res, built):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    m = res.manifest
    rev, blas, source = run_host(res)
    unknown = "not recorded"
    head = [f"<h1>retro-bench results: {esc(res.name)}</h1>"]
    if res.description:
        head.append(f"<p>{esc(res.description)}</p>")
    if res.figure_note:
        head.append(f"<p><b>Paper figure:</b> {esc(res.figure_note)}</p>")
    mods = [C.model_label(x) for x in C.models(res) if x]
    meta = [f'status {esc(m.get("status", "?"))}', f"{len(res.runs)} run(s)",
            f"revision {esc(rev or unknown)}" + (f" (from {esc(source)})" if source != "manifest" and rev else ""),
            f"BLAS {esc(blas or unknown)}" + (f" (from {esc(source)})" if source != "manifest" and blas else "")]
    if mods:
        meta.append(("models " if len(mods) > 1 else "model ") + ", ".join(esc(x) for x in mods))
    meta += [f"results {esc(res.path)}"] + [f"with {esc(o.path)}" for o in res.others]
    meta.append(f"report generated {esc(now)}")
    head.append('<p class="meta">' + " · ".join(meta) + "</p>")
    closed = is_closed_loop(res)
    nav = ('<nav><a href="#figures">Figures</a>' + ('<a href="#closed-loop">Closed loop</a>' if closed else "")
           + '<a href="#runs">Runs</a><a href="#best">Best per budget</a><a href="#manifest">Manifest</a></nav>')
    body = [
        "\n".join(head), nav,
        '<section id="figures"><h2>Figures</h2>' + figures_html(built) + "</section>",
        ('<section id="closed-loop"><h2>Closed loop</h2><p class="meta">Each method inside the model\'s decode '
         "(docs/closed-loop.md): KL(full || method) over teacher-forced positions, top-1 agreement, perplexity of "
         "the continuation, greedy NIAH accuracy, tokens before the first divergence, median ms per decode "
         "step (all layers).</p>" + closed_loop_html(res) + "</section>") if closed else "",
        '<section id="runs"><h2>Runs</h2><p class="meta">Means over (layer, query head, step) unless marked; '
        "exact/est/scan in % of the visible tokens; bytes per decode step per KV head.</p>"
        + (runs_table(res) if res.runs else "<p>No run records.</p>") + "</section>",
        '<section id="best"><h2>Best configuration per method and exact-token budget</h2>'
        '<p class="meta">Runs binned by mean exact_frac; in each bin, each method\'s run with the lowest '
        "out_err, and its run with the highest recall.</p>"
        + (best_table(res) if res.runs else "<p>No run records.</p>") + "</section>",
        '<section id="manifest"><h2>Manifest</h2>' + manifest_html(res) + "</section>",
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>retro-bench report: {esc(res.name)}</title><style>{CSS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")
