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

source "$(dirname "${BASH_SOURCE[0]}")/pinned-headers.sh"
pinned_headers_begin "cudnn frontend headers" "$dest"
echo "[setup] cudnn frontend headers: nvidia-cudnn-frontend==$FE_VERSION -> $dest" >&2
# the wheel is built per Python version (its Python module); the headers are the same in every one
"${PIP[@]}" download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$TMP/wheels" \
  "nvidia-cudnn-frontend==$FE_VERSION" --platform manylinux_2_28_x86_64 --python-version 3.11 \
  --implementation cp --abi cp311 >&2
whl=$(pinned_wheel 'nvidia_cudnn_frontend-*.whl' "$FE_SHA")  # an assignment: a mismatch stops the script
pinned_take "$whl" include/ include
test -f "$TMP/include/cudnn_frontend.h"
pinned_headers_finish "$dest" "nvidia-cudnn-frontend==$FE_VERSION sha256 $FE_SHA"
