#!/usr/bin/env bash
# Idempotent: unpacks FlashInfer's header-only CUDA kernels (the library full-attention baseline of the
# cuda backend, kernels/library/flashinfer_decode.cu) and the newer CCCL headers they need from two PyPI wheels,
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

source "$(dirname "${BASH_SOURCE[0]}")/pinned-headers.sh"
pinned_headers_begin "flashinfer headers" "$dest"
echo "[setup] flashinfer headers: flashinfer-python==$FI_VERSION, nvidia-cuda-cccl==$CCCL_VERSION -> $dest" >&2
"${PIP[@]}" download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$TMP/wheels" \
  "flashinfer-python==$FI_VERSION" "nvidia-cuda-cccl==$CCCL_VERSION" \
  --platform manylinux_2_17_x86_64 --platform any --python-version 3.11 >&2
fi_whl=$(pinned_wheel 'flashinfer_python-*.whl' "$FI_SHA")  # an assignment: a mismatch stops the script
cccl_whl=$(pinned_wheel 'nvidia_cuda_cccl-*.whl' "$CCCL_SHA")
pinned_take "$fi_whl" flashinfer/data/include/ include
pinned_take "$cccl_whl" nvidia/cu13/include/cccl/ cccl
test -f "$TMP/include/flashinfer/attention/decode.cuh" && test -d "$TMP/cccl/cuda"
pinned_headers_finish "$dest" \
  "flashinfer-python==$FI_VERSION sha256 $FI_SHA; nvidia-cuda-cccl==$CCCL_VERSION sha256 $CCCL_SHA"
