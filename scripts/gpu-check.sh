#!/usr/bin/env bash
# Builds the CUDA kernels with their CPU references (RETRO_GPU_ONLY: needs only CMake, a C++20 compiler
# and CUDA - no HDF5/FAISS/BLAS/GTest/benchmark/fmt) and runs every kernel check and microbenchmark,
# writing under OUTDIR:
#   gpu-report.json / gpu-report.txt   device, D2D and pinned H2D bandwidth, FP32 peak, each check's
#                                      pass/fail with its measured errors, each benchmark's time, rate
#                                      and fraction of its ceiling, wave step vs full per layer
#   configure.log build.log gpu-check.log nvidia-smi.txt
# usage: bash scripts/gpu-check.sh OUTDIR [--quick] [--checks-only] [--filter NAME]
# env:   RETRO_GPU_BUILD (build dir, default <repo>/build-gpu), RETRO_CUDA_ARCH (default: the device's
#        compute capability from nvidia-smi, else 90)
# exit:  0 all checks passed, 1 a check failed, 2 build failed, 77 no CUDA device (checks skipped)
set -uo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: bash scripts/gpu-check.sh OUTDIR [--quick] [--checks-only] [--filter NAME]" >&2
  exit 2
fi
OUT=$1; shift
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${RETRO_GPU_BUILD:-$ROOT/build-gpu}

# nvcc is often not on PATH on GPU boxes
if ! command -v nvcc >/dev/null 2>&1; then
  for c in /usr/local/cuda/bin /usr/local/cuda-*/bin /opt/cuda/bin; do
    [[ -x $c/nvcc ]] && { export PATH="$c:$PATH"; break; }
  done
fi
export CUDACXX=${CUDACXX:-$(command -v nvcc || true)}
ARCH=${RETRO_CUDA_ARCH:-}
if [[ -z $ARCH ]] && command -v nvidia-smi >/dev/null 2>&1; then
  ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
fi
ARCH=${ARCH:-90}
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)

{ nvidia-smi 2>&1 || echo "nvidia-smi not available"; } > "$OUT/nvidia-smi.txt"
echo "gpu-check: nvcc=${CUDACXX:-none} arch=$ARCH build=$BUILD out=$OUT"
if ! cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DRETRO_GPU_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES="$ARCH" > "$OUT/configure.log" 2>&1; then
  echo "gpu-check: configure failed (see $OUT/configure.log)" >&2; tail -20 "$OUT/configure.log" >&2; exit 2
fi
if ! cmake --build "$BUILD" -j "$(nproc)" --target retro_gpu_check > "$OUT/build.log" 2>&1; then
  echo "gpu-check: build failed (see $OUT/build.log)" >&2; tail -40 "$OUT/build.log" >&2; exit 2
fi
"$BUILD/kernels/retro_gpu_check" --out "$OUT" "$@" 2>&1 | tee "$OUT/gpu-check.log"
rc=${PIPESTATUS[0]}
echo "gpu-check: exit $rc; report in $OUT/gpu-report.json and $OUT/gpu-report.txt"
exit "$rc"
