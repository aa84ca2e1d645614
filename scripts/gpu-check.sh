#!/usr/bin/env bash
# Builds the CUDA kernels with their CPU references and the CUDA backend's run path (RETRO_GPU_ONLY:
# needs only CMake, a C++20 compiler and CUDA - no HDF5/FAISS/BLAS/GTest/benchmark/fmt/JSON) and runs
# every kernel check, every microbenchmark and the wave decode step vs full attention per layer through
# the run path of `retro-bench run` with "backend": "cuda" (on an in-memory synthetic Llama-3-8B-shaped
# layer, 32K and 128K context, batch 1-64 as far as memory allows, next to the cost model's prediction on
# the matching hardware profile), writing under OUTDIR:
#   gpu-report.json / gpu-report.txt   device, D2D and pinned H2D bandwidth, FP32 peak, each check's
#                                      pass/fail with its measured errors, each benchmark's time, rate
#                                      and fraction of its ceiling, "wave_run": wave vs full per layer
#   hardware.txt                       the profile the prediction used (python/retro_bench/gpu/hardware_values.py)
#   retro-bench/                       `retro-bench run configs/gpu/wave-vs-full.json` with its results,
#                                      where retro-bench builds (it needs HDF5, FAISS, BLAS, fmt, CLI11,
#                                      nlohmann-json); else retro-bench/README.txt says why not
#   configure.log build.log gpu-check.log nvidia-smi.txt
# usage: bash scripts/gpu-check.sh OUTDIR [--quick] [--checks-only] [--filter NAME] [--wave-only]
# env:   RETRO_GPU_BUILD (build dir, default <repo>/build-gpu), RETRO_CUDA_ARCH (default: the device's
#        compute capability from nvidia-smi, else 90), RETRO_HARDWARE (profile name, default from the
#        device name: H200 -> h200, A100 -> a100-80gb-pcie4, else h100-sxm-pcie5), RETRO_FULL_BUILD
#        (retro-bench's build dir, default <repo>/build-gpu-full), RETRO_SKIP_RETRO_BENCH=1 (do not try),
#        RETRO_FLASHINFER_DIR (FlashInfer + CCCL headers made by scripts/flashinfer-headers.sh on a machine
#        with network: without them the library baseline is not built and its rows are missing),
#        RETRO_CUDNN_FRONTEND_DIR (likewise the cuDNN frontend's, scripts/cudnn-frontend-headers.sh),
#        RETRO_CUDNN_LIB (libcudnn.so.9 to load; default: PyTorch's nvidia/cudnn/lib where torch is there)
# Also under OUTDIR: sdpa.json (PyTorch SDPA on the same shapes, where torch sees the device) and
# summary.md (one table: SDPA, full by FlashInfer and by the own kernel, wave, HBM %, phases, model).
# exit:  0 all checks passed, 1 a check or the wave run failed, 2 build failed, 77 no CUDA device
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
# FlashInfer's headers (the library baseline) come from PyPI: a machine without network gets them carried,
# RETRO_FLASHINFER_DIR naming the folder scripts/flashinfer-headers.sh made elsewhere.
FIARGS=()
[[ -n ${RETRO_FLASHINFER_DIR:-} ]] && FIARGS=(-DRETRO_FLASHINFER_DIR="$RETRO_FLASHINFER_DIR")
[[ -n ${RETRO_CUDNN_FRONTEND_DIR:-} ]] && FIARGS+=(-DRETRO_CUDNN_FRONTEND_DIR="$RETRO_CUDNN_FRONTEND_DIR")
# cuDNN itself is loaded at run time: on the GPU machines it is inside PyTorch's wheel
source "$ROOT/scripts/gpu/cudnn-env.sh"
if ! cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DRETRO_GPU_ONLY=ON -DCMAKE_BUILD_TYPE=Release "${FIARGS[@]}" \
      -DCMAKE_CUDA_ARCHITECTURES="$ARCH" > "$OUT/configure.log" 2>&1; then
  echo "gpu-check: configure failed (see $OUT/configure.log)" >&2; tail -20 "$OUT/configure.log" >&2; exit 2
fi
if ! cmake --build "$BUILD" -j "$(nproc)" --target retro_gpu_check > "$OUT/build.log" 2>&1; then
  echo "gpu-check: build failed (see $OUT/build.log)" >&2; tail -40 "$OUT/build.log" >&2; exit 2
fi
# The hardware profile the cost model predicts for (the driver has no JSON library: key value lines).
HW=${RETRO_HARDWARE:-}
if [[ -z $HW ]]; then
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" in
    *H200*) HW=h200 ;; *A100*) HW=a100-80gb-pcie4 ;; *A6000*) HW=a6000 ;; *4090*) HW=rtx4090 ;; *) HW=h100-sxm-pcie5 ;;
  esac
fi
# The model is calibrated by this device (--measured: HBM, PCIe and transfer latency measured here); the
# profile gives what is not measured.
HWARGS=(--measured)
if command -v python3 >/dev/null 2>&1 &&
   python3 -B "$ROOT/python/retro_bench/_launch.py" retro_bench.gpu.hardware_values "$ROOT/configs/hardware/$HW.json" > "$OUT/hardware.txt"; then
  HWARGS+=(--hardware "$OUT/hardware.txt")
else
  echo "gpu-check: no python3 or no profile $HW: the unmeasured fields are the cost model's defaults" >&2
fi
"$BUILD/kernels/retro_gpu_check" --out "$OUT" "${HWARGS[@]}" "$@" 2>&1 | tee "$OUT/gpu-check.log"
rc=${PIPESTATUS[0]}

# The peer a user's framework calls (PyTorch SDPA, every backend) on the same shapes, where torch sees
# the device; then one table of everything (summary.md).
if [[ " $* " != *" --checks-only "* ]] && python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  PYTHONWARNINGS=ignore python3 -B "$ROOT/python/retro_bench/_launch.py" retro_bench.gpu.sdpa_baseline "$OUT/sdpa.json" > "$OUT/sdpa.log" 2>&1 ||
    echo "gpu-check: sdpa_baseline failed (see $OUT/sdpa.log)" >&2
fi
if [[ -f "$OUT/gpu-report.json" && " $* " != *" --checks-only "* ]] && command -v python3 >/dev/null 2>&1; then
  SDPA=(); [[ -f "$OUT/sdpa.json" ]] && SDPA=(--sdpa "$OUT/sdpa.json")
  python3 -B "$ROOT/python/retro_bench/_launch.py" retro_bench.gpu.summary_table "$OUT/gpu-report.json" "${SDPA[@]}" > "$OUT/summary.md" 2>/dev/null &&
    cat "$OUT/summary.md"
fi

# `retro-bench run` with "backend": "cuda" where retro-bench can be built (a GPU machine with the
# Debian libraries); the GPU machines this project is lent have none of them, so this normally records
# why it was not run and the wave-vs-full numbers are the driver's ("wave_run" above).
RB="$OUT/retro-bench"
mkdir -p "$RB"
if [[ $rc -eq 0 && -z ${RETRO_SKIP_RETRO_BENCH:-} && " $* " != *" --checks-only "* ]]; then
  FULL=${RETRO_FULL_BUILD:-$ROOT/build-gpu-full}
  if ! cmake -S "$ROOT" -B "$FULL" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DRETRO_CUDA=ON -DRETRO_BUILD_TESTS=OFF \
        -DRETRO_BUILD_BENCHMARKS=OFF -DCMAKE_CUDA_ARCHITECTURES="$ARCH" > "$RB/configure.log" 2>&1; then
    { echo "retro-bench cannot be built on this machine: its configure failed (see configure.log):"
      grep -m3 -E "Could NOT find|Could not find|not found" "$RB/configure.log"
      echo "The wave decode step vs full attention per layer ran in retro_gpu_check instead (gpu-report.txt,"
      echo "\"wave_run\" in gpu-report.json): the same run path (kernels/run) on an in-memory synthetic layer."
    } > "$RB/README.txt"
  elif ! cmake --build "$FULL" -j "$(nproc)" --target retro-bench > "$RB/build.log" 2>&1; then
    echo "retro-bench did not build (see build.log)" > "$RB/README.txt"; rc=1
  else
    ( cd "$ROOT" && "$FULL/retro-bench" run configs/gpu/wave-vs-full.json --results "$RB/results" --force ) \
      > "$RB/run.log" 2>&1 || rc=1
    echo "retro-bench run configs/gpu/wave-vs-full.json: see run.log and results/" > "$RB/README.txt"
  fi
else
  echo "retro-bench run not attempted (retro_gpu_check exit $rc, --checks-only or RETRO_SKIP_RETRO_BENCH)" > "$RB/README.txt"
fi
cat "$RB/README.txt"
echo "gpu-check: exit $rc; report in $OUT/gpu-report.json and $OUT/gpu-report.txt"
exit "$rc"
