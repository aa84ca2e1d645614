#!/usr/bin/env bash
# The main job: install what is missing, build, make the default synthetic trace if absent, run
# configs/quickstart.json, print the summary table and where the results are.
# Extra arguments are passed to `retro-bench run` (e.g. --force to rerun from scratch).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$RETRO_ROOT/scripts/setup.sh" --main  # the main job's packages only: the test command installs the rest
retro_configure main                        # no tests, benchmarks or CUDA kernels (the test command adds them)
retro_build retro-bench
cd "$RETRO_ROOT"
args=("$@")
if [[ ${#args[@]} -eq 0 && -d results/quickstart ]]; then args=(--resume); fi
exec "$RETRO_BUILD/retro-bench" run configs/quickstart.json "${args[@]}"
