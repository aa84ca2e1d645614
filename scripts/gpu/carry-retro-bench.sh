#!/usr/bin/env bash
# Packs the main build's retro-bench (the whole tool: every method, FAISS, HDF5, the cuda backend) and, where
# built, its GTest binary (retro_unit_tests: the CudaBackend.* tests on the device) with every
# shared library a bare GPU machine lacks — OpenBLAS, HDF5 and its dependencies, libpython, libstdc++ —
# into one compressed file, build-gpu/retro-bench.tar.xz (~20 MB, inside the device's 64 MiB carry), so that
# `retro-bench run` itself runs on a lent GPU machine (no Debian libraries, no network there): the GPU
# records are then the runner's own (one record format), and the methods that need FAISS or BLAS (the
# CPU-index methods, MagicPIG's key hashing, PQCache's codebooks) run there at full speed. glibc (libc, libm,
# the loader) is the machine's own, as for the carried GPU-only build.
# usage: bash scripts/gpu/carry-retro-bench.sh [BUILD_DIR]   (default build/; RETRO_CARRY_DIR: the output
# folder, default build-gpu); on the device:
#   bash scripts/gpu/unpack-retro-bench.sh    -> <a scratch folder>/rb/retro-bench (a launcher setting the library path)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
bin=$build/retro-bench
tests=$build/tests/retro_unit_tests  # packed too where built: its CudaBackend.* tests run on the device
out=${RETRO_CARRY_DIR:-$root/build-gpu}  # where the pack goes (the test sets a scratch folder)
[[ -x $bin ]] || { echo "carry-retro-bench: $bin missing: build it first (ninja -C $build retro-bench)" >&2; exit 2; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/rb/bin" "$stage/rb/lib" "$out"
skip='^(libc\.so|libm\.so|libresolv|libpthread|libdl|librt|linux-vdso|ld-linux)'
bins=("$bin")
[[ -x $tests ]] && bins+=("$tests")
for b in "${bins[@]}"; do
  ldd "$b" | awk '/=>/{print $1, $3}' | while read -r name path; do
    [[ $name =~ $skip ]] || cp -L "$path" "$stage/rb/lib/$name"
  done
  cp "$b" "$stage/rb/bin/"
done
cat > "$stage/rb/retro-bench" <<'EOF'
#!/bin/sh
# retro-bench with the libraries packed beside it (scripts/gpu/carry-retro-bench.sh)
d=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/bin/retro-bench" "$@"
EOF
chmod +x "$stage/rb/retro-bench"
for b in "$stage"/rb/bin/*; do
  missing=$(LD_LIBRARY_PATH=$stage/rb/lib ldd "$b" | grep "not found" || true)
  [[ -z $missing ]] || { echo "carry-retro-bench: unresolved ($b): $missing" >&2; exit 1; }
  # every library but glibc's resolves inside the pack
  outside=$(LD_LIBRARY_PATH=$stage/rb/lib ldd "$b" | awk '/=>/{print $1, $3}' | grep -vE "$skip" |
    grep -v " $stage/rb/lib/" || true)
  [[ -z $outside ]] || { echo "carry-retro-bench: resolved outside the pack ($b): $outside" >&2; exit 1; }
done
git -C "$root" describe --always --dirty --abbrev=12 > "$stage/rb/REVISION" 2>/dev/null || echo unknown > "$stage/rb/REVISION"
tar -C "$stage" -cf - rb | xz -T0 "-${RETRO_XZ_LEVEL:-6}" > "$out/retro-bench.tar.xz.tmp"
mv "$out/retro-bench.tar.xz.tmp" "$out/retro-bench.tar.xz"
echo "carry-retro-bench: $out/retro-bench.tar.xz ($(du -h "$out/retro-bench.tar.xz" | cut -f1), revision $(cat "$stage/rb/REVISION"))"
