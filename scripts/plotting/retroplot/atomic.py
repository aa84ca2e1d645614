"""Atomic output: every file is written under a temporary name in its directory and renamed into place,
so a reader never sees half a figure or half a report."""
import os
import tempfile


def _tmp(path):
    d = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(d, exist_ok=True)
    base = os.path.basename(path)
    ext = os.path.splitext(base)[1]
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{base}.tmp-", suffix=ext)
    return fd, tmp


def write_bytes_atomic(path, data):
    fd, tmp = _tmp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text_atomic(path, text):
    write_bytes_atomic(path, text.encode("utf-8"))


def savefig_atomic(fig, path, fmt, dpi=300):
    import io
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi, metadata=_metadata(fmt))
    write_bytes_atomic(path, buf.getvalue())


def _metadata(fmt):
    # Reproducible files: no creation date in PDFs, a fixed creator string.
    if fmt == "pdf":
        return {"Creator": "retro-bench plot", "Producer": "matplotlib", "CreationDate": None}
    if fmt == "png":
        return {"Software": "retro-bench plot (matplotlib)"}
    if fmt == "svg":
        return {"Date": None}
    return None
