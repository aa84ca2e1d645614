#!/usr/bin/env bash
# The whole test suite (what CI runs; docs/testing.md): install what is missing, build, run every test
# (unit, CLI integration, reliability, Python; GPU tests report themselves skipped without a GPU); then
# the unit, CLI and reliability tests again under ASan + UBSan (build-asan/), then each libFuzzer target
# for a bounded time on its corpus (build-fuzz/). Arguments go to the first ctest (e.g. -R pattern).
#   RETRO_SANITIZE_TESTS=0  skips the ASan + UBSan stage (default 1: on)
#   RETRO_FUZZ_SECONDS=N    seconds per fuzz target (default 60; 0 skips the fuzz stage)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$RETRO_ROOT/scripts/setup.sh"
stage() { echo "[test] $1 (${SECONDS} s since start)" >&2; }
retro_build
cd "$RETRO_BUILD"
ctest --output-on-failure -j "$(nproc)" "$@"
stage "main suite done"

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
