"""A figure to a file, atomically (retro_bench.atomic), with reproducible metadata: the same results give
the same bytes."""
import io

from ..atomic import write_bytes


def savefig_atomic(fig, path, fmt, dpi=300):
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi, metadata=_metadata(fmt))
    write_bytes(path, buf.getvalue(), fsync=True)


def _metadata(fmt):
    # Reproducible files: no creation date in PDFs, a fixed creator string.
    if fmt == "pdf":
        return {"Creator": "retro-bench plot", "Producer": "matplotlib", "CreationDate": None}
    if fmt == "png":
        return {"Software": "retro-bench plot (matplotlib)"}
    if fmt == "svg":
        return {"Date": None}
    return None
