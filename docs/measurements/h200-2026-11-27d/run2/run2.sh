#!/usr/bin/env bash
# lease call 2: cuDNN's graph variants (stats x mask) beside FlashInfer and the own kernel; the candidate's
# checks, GTest and wave-hbm rows (plain select atomics, cub schedule); ncu of the batch-1 step and the
# select kernel's warp states
set -uo pipefail
out=$1
root=$(pwd)
B=$root/build-gpu/kernels/retro_gpu_check
source scripts/gpu/cudnn-env.sh
mkdir -p $out
t0=$SECONDS
timeout 120 $B --out $out/bench --bench-only full_decode --contexts 32768,131072 --batches 1,8 > $out/bench.log 2>&1
echo "bench: exit $? ($((SECONDS - t0)) s)"; grep -E "^full_decode" $out/bench/gpu-report.txt
RETRO_HARDWARE=h200 RETRO_WAVE_KV=gpu RETRO_LEASE_BUDGET=330 RETRO_WAVE_TIMEOUT=170 RETRO_SDPA_TIMEOUT=40 \
  RETRO_NCU_BATCHES=1 bash scripts/gpu/lease-run.sh $out/r 32768,131072 1,8,32,64
t0=$SECONDS
timeout 60 ncu --clock-control none --section WarpStateStats --section LaunchStats --section Occupancy \
  --section SpeedOfLight -k regex:'cluster_select|cluster_scores|device_schedule' --launch-count 6 \
  $B --out $out/ncu-sel-run --wave-only --wave-kv gpu --contexts 131072 --batches 1 > $out/ncu-select.txt 2> $out/ncu-select.log
echo "ncu select: exit $? ($((SECONDS - t0)) s)"
