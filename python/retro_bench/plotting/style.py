"""Paper style: one colour and marker per method in every figure, metric labels with units, rcParams
for a ~3.3 in column at 8-9 pt. Pure data except apply_rc() (matplotlib imported lazily)."""
import zlib

COLUMN_W = 3.33   # in: one column of a two-column paper (ACM/IEEE/VLDB)
WIDE_W = 7.0      # in: both columns (figure*)

# Okabe-Ito colour-blind-safe palette + greys; each method keeps its colour and marker everywhere.
METHOD_STYLE = {
    "full":                {"color": "#000000", "marker": "*", "name": "Full attention"},
    "oracle_topk":         {"color": "#6E6E6E", "marker": "D", "name": "Oracle top-k"},
    "streaming":           {"color": "#E69F00", "marker": "s", "name": "StreamingLLM"},
    "wave":                {"color": "#0072B2", "marker": "o", "name": "RetroInfer (wave)"},
    "quest":               {"color": "#009E73", "marker": "^", "name": "Quest"},
    "faiss_ivf":           {"color": "#CC79A7", "marker": "v", "name": "IVF (FAISS)"},
    "faiss_hnsw":          {"color": "#D55E00", "marker": "P", "name": "HNSW (FAISS)"},
    "faiss_flat":          {"color": "#332288", "marker": "x", "name": "Flat (FAISS)"},
    "faiss_ivfpq":         {"color": "#882255", "marker": "<", "name": "IVF-PQ (FAISS)"},
    "retrieval_attention": {"color": "#56B4E9", "marker": "X", "name": "RetrievalAttention"},
    "pqcache":             {"color": "#8C564B", "marker": "h", "name": "PQCache"},
    "magicpig":            {"color": "#9467BD", "marker": ">", "name": "MagicPIG"},
    "ctkvr":               {"color": "#17BECF", "marker": "p", "name": "CTKVR"},
    "infllm":              {"color": "#BCBD22", "marker": "d", "name": "InfLLM"},
}
# Other spellings of the same method (ood-recall index names, future method names).
ALIASES = {
    "ivf": "faiss_ivf", "ivf_flat": "faiss_ivf", "ivfflat": "faiss_ivf", "faiss-ivf": "faiss_ivf",
    "hnsw": "faiss_hnsw", "faiss-hnsw": "faiss_hnsw", "flat": "faiss_flat", "exact": "faiss_flat",
    "ivfpq": "faiss_ivfpq", "ivf_pq": "faiss_ivfpq", "roargraph": "retrieval_attention",
    "retrievalattention": "retrieval_attention", "ra": "retrieval_attention", "topk": "oracle_topk",
    "oracle": "oracle_topk", "retroinfer": "wave", "streamingllm": "streaming", "pq": "pqcache",
}
_FALLBACK_COLORS = ["#999933", "#117733", "#44AA99", "#88CCEE", "#DDCC77", "#AA4499", "#661100", "#6699CC"]
_FALLBACK_MARKERS = ["o", "s", "^", "v", "D", "P", "X", "h"]


def canonical_method(name):
    n = str(name).lower()
    return ALIASES.get(n, ALIASES.get(n.replace("-", "_"), n))


def method_style(name):
    """{'color', 'marker', 'name'} for a method: fixed for known methods, a stable hash otherwise."""
    n = canonical_method(name)
    if n in METHOD_STYLE:
        return dict(METHOD_STYLE[n])
    h = zlib.crc32(n.encode())
    # a Python method "py:dir/file.py:Class" is shown as "Class (Python)": the path would fill the legend
    shown = str(name).rsplit(":", 1)[1] + " (Python)" if str(name).startswith("py:") else str(name)
    return {"color": _FALLBACK_COLORS[h % len(_FALLBACK_COLORS)],
            "marker": _FALLBACK_MARKERS[(h // 7) % len(_FALLBACK_MARKERS)], "name": shown}


# Metric -> (axis label with unit, scale applied to the stored value, direction)
METRIC_LABEL = {
    "mass": ("Attention mass captured", 1.0, "higher"),
    "out_err": ("Output error ‖ô−o‖/‖o‖", 1.0, "lower"),
    "out_cos": ("Output cosine similarity", 1.0, "higher"),
    "lse_err": ("|LSE error| (nats)", 1.0, "lower"),
    "exact_frac": ("Exact tokens (% of context)", 100.0, "lower"),
    "est_frac": ("Estimated tokens (% of context)", 100.0, None),
    "scan_ops": ("Scanned keys (% of context)", 100.0, "lower"),
    "h2d_bytes": ("Host→GPU traffic (KiB/step/KV head)", 1 / 1024, "lower"),
    "d2h_bytes": ("GPU→host traffic (KiB/step/KV head)", 1 / 1024, "lower"),
    "gpu_bytes": ("GPU memory (MiB/KV head)", 1 / 2 ** 20, "lower"),
    "select_us": ("Selection time (µs/step)", 1.0, "lower"),
    "attend_us": ("Attention time (µs/step)", 1.0, "lower"),
    "build_ms": ("Index build time (s/KV head)", 1e-3, "lower"),
}


def metric_label(name):
    if name.startswith("recall@"):
        return f"Recall@{name.split('@', 1)[1]}"
    return METRIC_LABEL.get(name, (name, 1.0, None))[0]


def metric_scale(name):
    return METRIC_LABEL.get(name, (name, 1.0, None))[1]


def metric_direction(name):
    if name.startswith("recall@"):
        return "higher"
    return METRIC_LABEL.get(name, (name, 1.0, None))[2]


def metric_short(name):
    """Panel title: 'Recall@100 ↑', 'Output error ↓'."""
    short = {"mass": "Attention mass", "out_err": "Output error", "out_cos": "Output cosine",
             "lse_err": "LSE error"}.get(name) or metric_label(name)
    d = metric_direction(name)
    return short + (" ↑" if d == "higher" else " ↓" if d == "lower" else "")


def tokens_label(n):
    """16384 -> '16K', 1000 -> '1000', 0 -> '0'."""
    n = int(n)
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}K"
    return str(n)


def pct_label(frac):
    """0.018 -> '1.8%'."""
    p = 100.0 * float(frac)
    return f"{p:.3g}%"


def apply_rc():
    import matplotlib
    matplotlib.rcParams.update({
        "font.family": "DejaVu Sans",
        "font.size": 8,
        "axes.titlesize": 8,
        "axes.labelsize": 8,
        "xtick.labelsize": 7,
        "ytick.labelsize": 7,
        "legend.fontsize": 7,
        "legend.frameon": False,
        "legend.handlelength": 1.8,
        "legend.columnspacing": 1.0,
        "legend.handletextpad": 0.4,
        "lines.linewidth": 1.2,
        "lines.markersize": 4,
        "axes.linewidth": 0.6,
        "axes.grid": True,
        "grid.linewidth": 0.4,
        "grid.alpha": 0.35,
        "xtick.major.width": 0.6,
        "ytick.major.width": 0.6,
        "xtick.major.size": 2.5,
        "ytick.major.size": 2.5,
        "xtick.minor.size": 1.5,
        "ytick.minor.size": 1.5,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "savefig.dpi": 300,
        "savefig.bbox": "tight",
        "savefig.pad_inches": 0.02,
        "pdf.fonttype": 42,   # TrueType in PDFs (camera-ready requirement at most venues)
        "ps.fonttype": 42,
        "svg.fonttype": "none",
        "figure.constrained_layout.use": False,
    })
