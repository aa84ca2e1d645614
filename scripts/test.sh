#!/usr/bin/env bash
# The whole test suite (what CI runs; docs/testing.md): install what is missing, build, run every test
# (unit, CLI integration, reliability, Python; GPU tests report themselves skipped without a GPU); then,
# where nvcc is, the GPU-only build (build-gpu-only/, what the GPU machines build) and its driver; then
# the unit, CLI and reliability tests again under ASan + UBSan (build-asan/), then each libFuzzer target
# for a bounded time on its corpus (build-fuzz/). Arguments go to the first ctest (e.g. -R pattern).
#   RETRO_SANITIZE_TESTS=0  skips the ASan + UBSan stage (default 1: on)
#   RETRO_FUZZ_SECONDS=N    seconds per fuzz target (default 60; 0 skips the fuzz stage)
#   RETRO_GPU_ONLY_BUILD=0  skips the GPU-only build (default 1: built where nvcc is)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$RETRO_ROOT/scripts/setup.sh"
stage() { echo "[test] $1 (${SECONDS} s since start)" >&2; }
retro_configure full  # tests, benchmarks and the CUDA kernels (a quickstart's build/ is widened)
retro_build
cd "$RETRO_BUILD"
ctest --output-on-failure -j "$(nproc)" "$@"
stage "main suite done"

# The GPU machines' build (RETRO_GPU_ONLY: kernels, references, run path, retro_gpu_check; the Debian
# libraries' headers are #error stand-ins there), compiled wherever nvcc is, so it cannot break unseen.
# Its driver then runs: 77 (no device: every check skipped) here, 0 on a GPU machine.
if [[ "${RETRO_GPU_ONLY_BUILD:-1}" != 0 && -n "$(retro_nvcc)" ]]; then
  stage "GPU-only build: $RETRO_BUILD_GPU_ONLY"
  retro_build_gpu_only
  set +e
  "$RETRO_BUILD_GPU_ONLY/kernels/retro_gpu_check" --checks-only --out "$RETRO_BUILD_GPU_ONLY/check-report" >/dev/null 2>&1
  rc=$?
  set -e
  if [[ $rc -ne 0 && $rc -ne 77 ]]; then
    echo "[test] retro_gpu_check (GPU-only build) failed: exit $rc ($RETRO_BUILD_GPU_ONLY/check-report)" >&2; exit 1
  fi
  stage "GPU-only build done (retro_gpu_check exit $rc)"
fi

if [[ "${RETRO_SANITIZE_TESTS:-1}" != 0 ]]; then
  retro_sanitizer_env
  stage "ASan + UBSan build: $RETRO_BUILD_ASAN"
  retro_build_asan
  (cd "$RETRO_BUILD_ASAN" && ctest --output-on-failure -j "$(nproc)" -L 'unit|cli|reliability')
  stage "ASan + UBSan tests done"
fi

fuzz_s="${RETRO_FUZZ_SECONDS:-60}"
if [[ "$fuzz_s" != 0 ]]; then
  retro_sanitizer_env
  stage "libFuzzer build: $RETRO_BUILD_FUZZ"
  retro_build_fuzz
  cmake "$RETRO_BUILD_FUZZ" -DRETRO_FUZZ_SECONDS="$fuzz_s" -DRETRO_BENCH_FOR_FUZZ="$RETRO_BUILD/retro-bench" >/dev/null
  (cd "$RETRO_BUILD_FUZZ" && ctest --output-on-failure -L '^fuzz$')
  stage "fuzzing done"
fi
