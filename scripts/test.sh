#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run every test (unit, CLI integration; GPU
# tests report themselves skipped without a GPU).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$RETRO_ROOT/scripts/setup.sh"
retro_build
cd "$RETRO_BUILD"
ctest --output-on-failure -j "$(nproc)" "$@"
