#!/usr/bin/env bash
# Prepares build-gpu/ for a lent GPU machine (run(carry=["build-gpu"]), 64 MiB at most): the GPU-only
# retro_gpu_check (build-gpu-only/, RETRO_GPU_ONLY: no Debian libraries needed there) as
# build-gpu/kernels/retro_gpu_check for scripts/gpu/lease-run.sh, and the main build's retro-bench with its
# GTest binary and libraries as build-gpu/retro-bench.tar.xz (scripts/gpu/carry-retro-bench.sh) for
# lease-run.sh's CudaBackend.* tests and scripts/gpu/lease-figure12.sh. Builds what is stale first
# (scripts/env.sh: retro_build, retro_build_gpu_only); fails when the folder passes the carry limit.
# usage: bash scripts/gpu/prepare-carry.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
source scripts/env.sh
retro_build retro-bench retro_unit_tests > /tmp/prepare-carry-build.log 2>&1 ||
  { tail -20 /tmp/prepare-carry-build.log; exit 1; }
retro_build_gpu_only > /tmp/prepare-carry-gpu-only.log 2>&1 || { tail -20 /tmp/prepare-carry-gpu-only.log; exit 1; }
rm -rf build-gpu && mkdir -p build-gpu/kernels
cp build-gpu-only/kernels/retro_gpu_check build-gpu/kernels/
git describe --always --dirty --abbrev=12 > build-gpu/REVISION 2>/dev/null || echo unknown > build-gpu/REVISION
bash scripts/gpu/carry-retro-bench.sh
bytes=$(du -sb build-gpu | cut -f1)
# the limit holds the working tree that travels too (tracked and untracked-not-ignored files)
tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2> /dev/null | tail -1 | cut -f1)
limit=$((64 * 1024 * 1024))
echo "prepare-carry: build-gpu/ holds $((bytes / 1024 / 1024)) MiB, the tree $((tree / 1024 / 1024)) MiB, of the" \
  "$((limit / 1024 / 1024)) MiB a call carries (revision $(cat build-gpu/REVISION)); run nothing that writes into" \
  "build-gpu/ before the lease"
((bytes + tree <= limit)) || { echo "prepare-carry: over the carry limit" >&2; exit 1; }
