#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run every test (unit, CLI integration; GPU
# tests report themselves skipped without a GPU); then the unit and CLI tests again under ASan + UBSan
# (build-asan) and each libFuzzer target for a bounded time on its corpus (build-fuzz). docs/testing.md.
# Arguments go to the first ctest (e.g. -R pattern). RETRO_SANITIZE_TESTS=1 adds the sanitizer and fuzz
# stages; RETRO_FUZZ_SECONDS (default 60) is the time per fuzz target.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$RETRO_ROOT/scripts/setup.sh"
retro_build
cd "$RETRO_BUILD"
ctest --output-on-failure -j "$(nproc)" "$@"

if [[ "${RETRO_SANITIZE_TESTS:-0}" != 1 ]]; then exit 0; fi
retro_sanitizer_env
echo "[test] ASan + UBSan build: $RETRO_BUILD_ASAN" >&2
retro_build_asan
(cd "$RETRO_BUILD_ASAN" && ctest --output-on-failure -j "$(nproc)" -L 'unit|cli')

echo "[test] libFuzzer build: $RETRO_BUILD_FUZZ" >&2
retro_build_fuzz
cmake "$RETRO_BUILD_FUZZ" -DRETRO_FUZZ_SECONDS="${RETRO_FUZZ_SECONDS:-60}" >/dev/null
(cd "$RETRO_BUILD_FUZZ" && ctest --output-on-failure -L fuzz)
