#!/usr/bin/env bash
# Idempotent: unpacks the cuDNN frontend's header-only C++ API (the cuDNN full-attention baseline of the
# cuda backend, kernels/cudnn_decode.cpp) from the nvidia-cudnn-frontend wheel on PyPI, pinned by version
# and SHA-256, into the project's cache. Only include/ is taken out (MIT licensed); no code of the package
# is run or imported. cuDNN itself is not needed to build: cudnn.h comes with the CUDA toolkit here, and
# the library is loaded at run time (docs/cuda.md). Prints the folder; prints nothing else when it is
# already there.
#   RETRO_CUDNN_FRONTEND_DIR   where (default ${XDG_CACHE_HOME:-~/.cache}/retro-bench/cudnn-frontend-1.32.0);
#                              CMake looks in the same place (kernels/CMakeLists.txt)
set -euo pipefail
FE_VERSION=1.32.0
FE_SHA=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
dest="${RETRO_CUDNN_FRONTEND_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/retro-bench/cudnn-frontend-$FE_VERSION}"
if [[ -f "$dest/.complete" ]]; then echo "$dest"; exit 0; fi

pip=()
for py in "${RETRO_DUMP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/retro-bench/dump-venv}/bin/python" python3 /usr/bin/python3; do
  if "$py" -m pip --version >/dev/null 2>&1; then pip=("$py" -m pip); break; fi
done
if ((${#pip[@]} == 0)); then
  echo "[setup] cudnn frontend headers: no pip found (run scripts/setup.sh first)" >&2; exit 1
fi
mkdir -p "$(dirname "$dest")"
tmp=$(mktemp -d "$(dirname "$dest")/.cudnn-frontend.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "[setup] cudnn frontend headers: nvidia-cudnn-frontend==$FE_VERSION -> $dest" >&2
# the wheel is built per Python version (its Python module); the headers are the same in every one
"${pip[@]}" download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$tmp/wheels" \
  "nvidia-cudnn-frontend==$FE_VERSION" --platform manylinux_2_28_x86_64 --python-version 3.11 \
  --implementation cp --abi cp311 >&2
whl=$(ls "$tmp"/wheels/nvidia_cudnn_frontend-*.whl)
if [[ "$(sha256sum "$whl" | cut -d' ' -f1)" != "$FE_SHA" ]]; then
  echo "[setup] cudnn frontend headers: $whl: SHA-256 is not the pinned $FE_SHA" >&2; exit 1
fi
/usr/bin/python3 - "$whl" "$tmp" <<'PY'
import sys, zipfile, os
whl, out = sys.argv[1:3]
n = 0
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if name.startswith("include/") and not name.endswith("/"):
            path = os.path.join(out, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with z.open(name) as src, open(path, "wb") as dst:
                dst.write(src.read())
            n += 1
if n == 0:
    sys.exit(f"{whl}: no files under include/")
PY
test -f "$tmp/include/cudnn_frontend.h"
rm -rf "$tmp/wheels"
echo "nvidia-cudnn-frontend==$FE_VERSION sha256 $FE_SHA" > "$tmp/.complete"
# another process may have finished first: keep its copy (same pinned content)
if ! mv -T "$tmp" "$dest" 2>/dev/null; then rm -rf "$tmp"; fi
trap - EXIT
echo "$dest"
