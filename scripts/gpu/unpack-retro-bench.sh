#!/usr/bin/env bash
# Unpacks build-gpu/retro-bench.tar.xz (scripts/gpu/carry-retro-bench.sh) into build-gpu/rb/ and checks the
# packed retro-bench starts here (its libraries found; `retro-bench --version`). Prints the launcher's path.
# usage: bash scripts/gpu/unpack-retro-bench.sh [DIR]   (default build-gpu)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=${1:-$root/build-gpu}
pack=$dir/retro-bench.tar.xz
[[ -f $pack ]] || { echo "unpack-retro-bench: $pack missing (scripts/gpu/carry-retro-bench.sh packs it)" >&2; exit 2; }
rm -rf "$dir/rb"
xz -dc "$pack" | tar -C "$dir" -xf -
missing=$(LD_LIBRARY_PATH=$dir/rb/lib ldd "$dir/rb/bin/retro-bench" | grep "not found" || true)
[[ -z $missing ]] || { echo "unpack-retro-bench: libraries this machine lacks: $missing" >&2; exit 1; }
"$dir/rb/retro-bench" --version >&2
echo "$dir/rb/retro-bench"
