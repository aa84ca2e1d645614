#!/usr/bin/env bash
# Runs the trace dumper (retro_bench.dump.dump_trace, python/retro_bench/dump/) with the pinned venv
# (scripts/dump/setup_venv.sh makes it when missing).
#   scripts/dump/dump.sh OUT.h5 --model smollm2 --recipe datasets/recipes/niah-mobydick-8k.json
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bash "$here/setup_venv.sh"
venv="${RETRO_DUMP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/retro-bench/dump-venv}"
exec "$venv/bin/python" -B "$here/../../python/retro_bench/_launch.py" retro_bench.dump.dump_trace "$@"
