#!/usr/bin/env bash
# The main job: install what is missing, build, make the default synthetic trace if absent, run
# configs/quickstart.json, print the summary table and where the results are.
# Extra arguments are passed to `retro-bench run` (e.g. --force to rerun from scratch).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$RETRO_ROOT/scripts/setup.sh"
retro_build retro-bench  # the main job's program only: the tests, benchmarks and Python module are the test command's
cd "$RETRO_ROOT"
args=("$@")
if [[ ${#args[@]} -eq 0 && -d results/quickstart ]]; then args=(--resume); fi
exec "$RETRO_BUILD/retro-bench" run configs/quickstart.json "${args[@]}"
