"""Out-of-distribution queries: recall vs. scanned keys for decode queries vs. keys as queries."""
from collections import OrderedDict

from .. import style
from .drawing import legend_above, pct_axis
from .registry import drawer, figure


# ----------------------------------------------------------------------------------------------------
# recall vs. scanned fraction, decode queries vs. keys as queries (RetrievalAttention Fig. 3a / 6)

_OOD_X = ("scanned_frac", "scan_frac", "scanned_fraction", "frac_scanned", "scanned", "scan_ops")
_OOD_NAME = ("index", "method", "name", "label")
_OOD_Q = ("queries", "query", "query_type", "query_kind", "query_source", "search")


def _ood_query_kind(v):
    s = str(v).lower().replace("-", "_").replace(" ", "_")
    if s in ("keys", "key", "k", "k2k", "k_to_k", "key_queries", "keys_as_queries") or s.startswith("k_to") \
            or s.startswith("key"):
        return "keys"
    return "decode"


def _ood_y_key(d, k):
    for c in (f"recall@{k}" if k else None, "recall", "recall_at_k"):
        if c and c in d:
            return c
    for c in d:
        if str(c).startswith("recall@"):
            return c
    return None


def _ood_index_name(obj):
    name = str(obj.get("index", "index"))
    if obj.get("mips") and obj.get("mips") != "ip":
        name += f" ({obj['mips']})"
    return name


def _ood_records(obj):
    """Flattens one ood-recall JSON into (name, query_kind, x, y) records and k. Accepts the output of
    `retro-bench ood-recall TRACE --json FILE` (one index per file: 'mean' rows with scanned_decode /
    recall_decode / scanned_keys / recall_keys per search setting) and a generic form (docs/plots.md)."""
    k = obj.get("k") or obj.get("recall_k")
    if isinstance(k, list):
        k = k[0] if k else None
    out = []
    mean = obj.get("mean")
    if isinstance(mean, list) and mean and isinstance(mean[0], dict) and "recall_decode" in mean[0]:
        name = _ood_index_name(obj)
        for p in mean:
            for qk, xk, yk in (("decode", "scanned_decode", "recall_decode"), ("keys", "scanned_keys", "recall_keys")):
                if p.get(xk) is not None and p.get(yk) is not None:
                    out.append((name, qk, float(p[xk]), float(p[yk])))
        return k, out
    lists = None
    for key in ("series", "curves", "results", "records", "points"):
        if isinstance(obj.get(key), list):
            lists = obj[key]
            break
    if lists is None:
        return k, out
    for s in lists:
        if not isinstance(s, dict):
            continue
        name = next((str(s[c]) for c in _OOD_NAME if c in s), "index")
        qk = _ood_query_kind(next((s[c] for c in _OOD_Q if c in s), "decode"))
        pts = s.get("points")
        if isinstance(pts, list):
            for p in pts:
                if not isinstance(p, dict):
                    continue
                xk = next((c for c in _OOD_X if c in p), None)
                yk = _ood_y_key(p, k)
                if xk and yk and p[xk] is not None and p[yk] is not None:
                    out.append((name, qk, float(p[xk]), float(p[yk])))
            continue
        xk = next((c for c in _OOD_X if c in s), None)
        yk = _ood_y_key(s, k)
        if xk and yk:
            xs, ys = s[xk], s[yk]
            if isinstance(xs, list) and isinstance(ys, list):
                out += [(name, qk, float(x), float(y)) for x, y in zip(xs, ys) if x is not None and y is not None]
            elif xs is not None and ys is not None:
                out.append((name, qk, float(xs), float(ys)))
    return k, out


@figure("ood_recall", "Recall vs. scanned keys: decode queries vs. keys as queries",
        needs="an ood-recall JSON file in the results directory (retro-bench ood-recall)",
        size=(style.COLUMN_W, 1.7), paper="RetrievalAttention Fig. 3a / Fig. 6")
def ood_recall(res):
    recs, k = [], None
    for obj in res.extras["ood_recall"]:
        kk, r = _ood_records(obj)
        k = k or kk
        recs += r
    if not recs:
        return None
    panels = []
    for qk, title in (("decode", "Q to K (decode queries)"), ("keys", "K to K (keys as queries)")):
        names = []
        for n, q, _, _ in recs:
            if q == qk and n not in names:
                names.append(n)
        series = []
        for n in names:
            pts = sorted((x, y) for nn, q, x, y in recs if nn == n and q == qk)
            series.append({"index": n, "points": [[x, y] for x, y in pts]})
        if series:
            panels.append({"queries": qk, "title": title, "series": series})
    return {"k": k or 100, "panels": panels}


# ====================================================================================================
# drawing (matplotlib imported by the caller; nothing here reads results)


@drawer("ood_recall")
def _draw_ood_recall(s, fig):
    n = len(s["panels"])
    axes = fig.subplots(1, n, squeeze=False, sharey=True)[0]
    handles = OrderedDict()
    for ax, p in zip(axes, s["panels"]):
        for ser in p["series"]:
            base, _, suffix = ser["index"].partition(" (")
            st = style.method_style(base)
            label = st["name"] + (f" ({suffix}" if suffix else "")
            xs = [100 * x for x, _ in ser["points"]]
            ys = [y for _, y in ser["points"]]
            h = ax.plot(xs, ys, "--" if suffix else "-", color=st["color"], marker=st["marker"], ms=3,
                        mfc="white" if suffix else st["color"], label=label)[0]
            handles.setdefault(label, h)
        pct_axis(ax, "x")
        ax.set_title(p["title"])
        ax.set_xlabel("Scanned keys (%)")
        ax.set_ylim(0, 1.02)
    axes[0].set_ylabel(f"Recall@{s['k']}")
    fig.tight_layout(pad=0.3, w_pad=0.8)
    legend_above(fig, list(handles.values()), list(handles.keys()))
