#!/usr/bin/env bash
# Unpacks DIR/retro-bench.tar.xz (scripts/gpu/carry-retro-bench.sh) into DEST/rb/ and checks the packed
# retro-bench starts here (its libraries found; `retro-bench --version`). Prints the launcher's path. DEST is
# a scratch folder by default, not the carried DIR: what is unpacked there would travel with the next call.
# Without xz (a bare machine may lack it) Python's tarfile unpacks it.
# usage: bash scripts/gpu/unpack-retro-bench.sh [DIR [DEST]]   (defaults build-gpu and a new mktemp -d)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=${1:-$root/build-gpu}
dest=${2:-$(mktemp -d)}
pack=$dir/retro-bench.tar.xz
[[ -f $pack ]] || { echo "unpack-retro-bench: $pack missing (scripts/gpu/carry-retro-bench.sh packs it)" >&2; exit 2; }
mkdir -p "$dest"
rm -rf "$dest/rb"
if command -v xz > /dev/null; then
  xz -dc "$pack" | tar -C "$dest" -xf -
else
  python3 -m tarfile -e "$pack" "$dest"
  chmod +x "$dest"/rb/bin/* "$dest/rb/retro-bench"
fi
missing=$(LD_LIBRARY_PATH=$dest/rb/lib ldd "$dest/rb/bin/retro-bench" | grep "not found" || true)
[[ -z $missing ]] || { echo "unpack-retro-bench: libraries this machine lacks: $missing" >&2; exit 1; }
"$dest/rb/retro-bench" --version >&2
echo "$dest/rb/retro-bench"
