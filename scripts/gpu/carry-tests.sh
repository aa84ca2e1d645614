#!/usr/bin/env bash
# Packs the main build's GTest binary (its CudaBackend.* / Cuda* tests run on a real device when one is
# present) with the shared libraries a bare GPU machine lacks, into build-gpu/ (carried to a lent device:
# run(carry=["build-gpu"])). The GPU machines have none of the Debian libraries; the 64 MiB carry limit
# leaves out OpenBLAS (36 MB): Debian's reference BLAS/LAPACK stand in (the tests' results do not depend
# on the BLAS), with a two-function shim for the thread-count calls OpenBLAS alone exports.
# usage: bash scripts/gpu/carry-tests.sh [BUILD_DIR]   (default build/); then on the device:
#   LD_LIBRARY_PATH=build-gpu/lib build-gpu/retro_unit_tests --gtest_filter='CudaBackend.*:Cuda*'
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
bin=$build/tests/retro_unit_tests
out=$root/build-gpu
[[ -x $bin ]] || { echo "carry-tests: $bin missing: build it first (ninja -C $build retro_unit_tests)" >&2; exit 2; }
rm -rf "$out/lib" && mkdir -p "$out/lib"
skip='^(libc\.so|libm\.so|libstdc\+\+|libgcc_s|libresolv|libblas|liblapack|libopenblas|linux-vdso|ld-linux)'
ldd "$bin" | awk '/=>/{print $1, $3}' | while read -r name path; do
  [[ $name =~ $skip ]] || cp -L "$path" "$out/lib/$name"
done
arch=/usr/lib/x86_64-linux-gnu
cp -L "$arch/blas/libblas.so.3" "$arch/lapack/liblapack.so.3" "$out/lib/"
printf 'int openblas_get_num_threads(void){return 1;}\nvoid openblas_set_num_threads(int n){(void)n;}\n' |
  gcc -shared -fPIC -x c -o "$out/lib/libopenblas.so.0" -
cp "$bin" "$out/retro_unit_tests"
missing=$(LD_LIBRARY_PATH=$out/lib ldd "$out/retro_unit_tests" | grep "not found" || true)
[[ -z $missing ]] || { echo "carry-tests: unresolved: $missing" >&2; exit 1; }
# the revision the carried binaries were built from (the device has no .git): lease-run.sh reports it
git -C "$root" describe --always --dirty --abbrev=12 > "$out/REVISION" 2>/dev/null || echo unknown > "$out/REVISION"
du -sh "$out"
