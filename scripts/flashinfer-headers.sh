#!/usr/bin/env bash
# Idempotent: unpacks FlashInfer's header-only CUDA kernels (the library full-attention baseline of the
# cuda backend, kernels/flashinfer_decode.cu) and the newer CCCL headers they need from two PyPI wheels,
# pinned by version and SHA-256, into the project's cache. Only headers are taken out; no code of the
# packages is run or imported. Prints the folder; prints nothing else when it is already there.
#   RETRO_FLASHINFER_DIR   where (default ${XDG_CACHE_HOME:-~/.cache}/retro-bench/flashinfer-0.7.2.post1);
#                          CMake looks in the same place (kernels/CMakeLists.txt)
# Why the CCCL wheel: CUDA 13.0's bundled CCCL lacks cuda::fast_mod_div, which flashinfer/fastdiv.cuh uses.
set -euo pipefail
FI_VERSION=0.7.2.post1
FI_SHA=bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49
CCCL_VERSION=13.3.5.0.6
CCCL_SHA=d5230098fa2df5021e1a00c0c4eee41797671a91119d31e892463e5ccf3ee326
dest="${RETRO_FLASHINFER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/retro-bench/flashinfer-$FI_VERSION}"
if [[ -f "$dest/.complete" ]]; then echo "$dest"; exit 0; fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pip=()
for py in "${RETRO_DUMP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/retro-bench/dump-venv}/bin/python" python3 /usr/bin/python3; do
  if "$py" -m pip --version >/dev/null 2>&1; then pip=("$py" -m pip); break; fi
done
if ((${#pip[@]} == 0)); then
  echo "[setup] flashinfer headers: no pip found (run scripts/setup.sh first)" >&2; exit 1
fi
mkdir -p "$(dirname "$dest")"
tmp=$(mktemp -d "$(dirname "$dest")/.flashinfer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "[setup] flashinfer headers: flashinfer-python==$FI_VERSION, nvidia-cuda-cccl==$CCCL_VERSION -> $dest" >&2
"${pip[@]}" download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$tmp/wheels" \
  "flashinfer-python==$FI_VERSION" "nvidia-cuda-cccl==$CCCL_VERSION" \
  --platform manylinux_2_17_x86_64 --platform any --python-version 3.11 >&2
check() {  # wheel glob, expected sha256
  local f
  f=$(ls "$tmp"/wheels/$1)
  if [[ "$(sha256sum "$f" | cut -d' ' -f1)" != "$2" ]]; then
    echo "[setup] flashinfer headers: $f: SHA-256 is not the pinned $2" >&2; exit 1
  fi
  echo "$f"
}
fi_whl=$(check 'flashinfer_python-*.whl' "$FI_SHA")
cccl_whl=$(check 'nvidia_cuda_cccl-*.whl' "$CCCL_SHA")
/usr/bin/python3 - "$fi_whl" "$cccl_whl" "$tmp" <<'PY'
import sys, zipfile, os
fi, cccl, out = sys.argv[1:4]
def take(whl, prefix, to):
    n = 0
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if name.startswith(prefix) and not name.endswith("/"):
                rel = name[len(prefix):]
                path = os.path.join(out, to, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with z.open(name) as src, open(path, "wb") as dst:
                    dst.write(src.read())
                n += 1
    if n == 0:
        sys.exit(f"{whl}: no files under {prefix}")
take(fi, "flashinfer/data/include/", "include")
take(cccl, "nvidia/cu13/include/cccl/", "cccl")
PY
test -f "$tmp/include/flashinfer/attention/decode.cuh" && test -d "$tmp/cccl/cuda"
rm -rf "$tmp/wheels"
echo "flashinfer-python==$FI_VERSION sha256 $FI_SHA; nvidia-cuda-cccl==$CCCL_VERSION sha256 $CCCL_SHA" > "$tmp/.complete"
# another process may have finished first: keep its copy (same pinned content)
if ! mv -T "$tmp" "$dest" 2>/dev/null; then rm -rf "$tmp"; fi
trap - EXIT
echo "$dest"
