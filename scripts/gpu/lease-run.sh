#!/usr/bin/env bash
# One prepared run on a lent GPU machine with a retro_gpu_check built elsewhere (a CPU machine with nvcc:
# cmake -DRETRO_GPU_ONLY=ON; the GPU machines have no Debian libraries and no network, and FlashInfer's
# headers come from PyPI), carried as build-gpu/kernels/retro_gpu_check:
#   1. every kernel check against its CPU reference (LibraryDecode = FlashInfer's decode included)
#   2. PyTorch SDPA on the same shapes (python/retro_bench/gpu/sdpa_baseline.py), when torch sees the device
#   2b. when scripts/gpu/carry-tests.sh packed it into build-gpu/: the main build's GTest binary, its
#      CudaBackend.* tests on the device (the cuda backend's wave and full against the CPU methods)
#   3. the wave decode step vs full attention per layer, beside the seed baselines on the GPU (quest, pq, and
#      magicpig where built) and each batch's layer outside attention (cuBLAS: tokens/s per GPU, the table
#      model-throughput.md; Figure 15's ablation rows (wave-dev, -nocache, -async: ablation.md) and the offloaded
#      step against its bound (offload-bound.md); RETRO_SEEDS, default quest,pq: magicpig's key hashing takes minutes at 128K in
#      this BLAS-free build) (FlashInfer, cuDNN where libcudnn.so.9 loads —
#      scripts/gpu/cudnn-env.sh finds PyTorch's —, the own kernel; wave with the KV in host
#      memory, in device memory on the device alone, and in device memory through host lookups:
#      RETRO_WAVE_KV, default all), HBM fractions, the
#      cost model calibrated by the device (--measured) on the profile named by RETRO_HARDWARE (default
#      h100-sxm-pcie5) for what is not measured
#   4. with the time left (RETRO_NCU_CONTEXT, default 131072; RETRO_NCU_BATCHES, default 8; the first 160
#      matching launches, ~9 steps of 7 kernels per batch): each kernel of the wave step with
#      the KV in device memory, its duration from Nsight Compute (one metric, clocks left alone), where
#      ncu can read the counters (FlashInfer's decode kernel is left out: full's runs use it too; wave's
#      attend is FlashInfer's decode and merge plus finish_merge)
#   RETRO_BENCH=GROUP: the microbenchmarks of GROUP (wave_step: cluster_select's four histogram variants and its split,
#      estimate_attention's two block widths, the phases; full_decode: the own, FlashInfer's and cuDNN's kernels) on the contexts x
#      RETRO_BENCH_BATCHES (default the batches), into OUT/bench
#   RETRO_SEQUENCES=D: every wave run's batches over D distinct sequences (replica b runs sequence b mod D:
#      synthetic layers of other seeds; default 1: copies of one). Each (sequence, KV head)'s indexes are built
#      side by side on the host's cores (wave's k-means on the GPU one head at a time, its final pass and
#      pq's quantizer on the host: ~seconds per head at 128K in this BLAS-free build)
#   RETRO_STEPS=N, RETRO_WARM_STEPS=W: the wave run's decode steps and, of them, the first W untimed that fill
#      the block cache (--steps, --warm-steps; the one timing rule asks >= 64 timed: RETRO_STEPS=80
#      RETRO_WARM_STEPS=16)
#   RETRO_WAVE_TIMEOUT=S (default 330), RETRO_ROW_SLACK=S (default 60): each wave run's limit, and the seconds
#      before it after which it starts no row (--time-budget; a quarter of a shorter limit) and writes the rows
#      it has; the contexts run in the order given (131072,32768: 128K first)
#   RETRO_DEADLINE=S: the whole call within S seconds of its start (570 under the run tool's 600 s): each wave
#      run's limit cut to what is left less 20 s for the tables and RETRO_SIDE_MIN (default 90) per side run
#      after it (unless that leaves it under 60 s: the main run first, then the side runs in order); a run left
#      under 60 s is skipped, saying so — so one call holds the main rows and item 6's side runs. The steps
#      before the wave runs (checks, GTest, microbenchmarks, SDPA) are cut to what is left less what the wave
#      runs keep (RETRO_MAIN_MIN, default 200 s, for the main run and RETRO_SIDE_MIN per side run); one left
#      under 10 s is skipped, saying so
#   RETRO_PACK_TO=DIR: OUTDIR packed as DIR/<name of OUTDIR>.tgz after each wave run and at the end (the run
#      tool brings back 8 files of $OUT, 2 folders down: RETRO_PACK_TO=$OUT with OUTDIR elsewhere, e.g. /tmp/r1)
#   RETRO_PACKED_TESTS=0: not the packed GTest binary's CudaBackend.* (the suite's test of this script)
#   RETRO_PARITY_REF=DIR: the CPU k-means' reports (DIR/cpu-*/gpu-report.json) the wave run's batch-1 rows are
#      compared with into OUT/index-parity.md (issue 40 #3; default docs/measurements/cpu-index-parity-2026-11-30)
#   RETRO_SANITIZER=memcheck|racecheck|synccheck|initcheck: the checks once more under compute-sanitizer (a kernel
#      reading past its buffers, a shared-memory race — the split select's distributed shared memory —, a
#      barrier's misuse, an uninitialized read: what a check's comparison may not show), RETRO_SANITIZER_ARGS
#      to the binary (e.g. "--filter Quest"), within RETRO_SANITIZER_TIMEOUT (default 120 s) and the deadline
#   RETRO_WAVE_ARGS="...", RETRO_CHECKS_ARGS="...": more arguments to every wave run, to the checks' run (the
#      suite's test of this script: --tiny, --filter LaunchGate)
#   RETRO_HOST_THREADS=N: wave's host lookup workers (--host-threads; 1 = the caller alone, no pool): the
#      offloaded rows' host phase with and without the pool, call against call
#   RETRO_UNGATED_BATCHES=1,8: the device-only rows once more at those batches with --no-launch-gate (the
#      launch calls inside the timing, as before the gate), into OUT/wave-ungated
#   RETRO_VARIANT_BATCHES=1,8: the device-only rows once more at those batches with the kernel variants of
#      RETRO_VARIANT_ENV (default "RETRO_SELECT_SPLIT=on": cluster_select over a cluster of blocks per (b, KV
#      head), issue 40 #6; left out, with a line saying so, unless its check ClusterSelectSplit passed), into
#      OUT/wave-variants
#   RETRO_GRAPH_BATCHES=1,8: the device-only rows once more at those batches with --step-graph (full's and wave's
#      steps as one CUDA graph each, issue 40 #6; the select split on where it fits, RETRO_SELECT_SPLIT=auto,
#      when its check passed: both batch-1 levers), into OUT/wave-graph
# A retro_gpu_check.prev beside the binary (the previous revision's build) runs the wave step instead
# when the binary's own checks fail (but for CudnnDecode, a library the machine may lack; ClusterSelectSplit,
# a variant no default row takes, runs in a process of its own and only decides the variant rows).
# usage: bash scripts/gpu/lease-run.sh OUTDIR [CONTEXTS] [BATCHES]   (defaults 32768,131072 and 1,8,32)
set -uo pipefail
out=${1:?usage: lease-run.sh OUTDIR [CONTEXTS] [BATCHES]}
ctx=${2:-32768,131072}
bat=${3:-1,8,32}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${RETRO_GPU_CHECK:-$root/build-gpu/kernels/retro_gpu_check}
hw=${RETRO_HARDWARE:-h100-sxm-pcie5}
mkdir -p "$out"
# every kernel loaded when the process starts, not at its first launch: a first launch inside a gated step
# would wait for the module's load behind the gate (a timed-out gate, a step of milliseconds)
export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-EAGER}
# OUTDIR packed into RETRO_PACK_TO (one file back through the run tool), after each wave run and at the end
source "$root/scripts/gpu/pack-out.sh"
trap 'retro_pack_out "$out"' EXIT
trap 'exit 143' TERM INT
source "$root/scripts/gpu/cudnn-env.sh"  # cuDNN from PyTorch's wheel, for the full-cudnn rows
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > "$out/device.txt" 2>&1
[[ -f $root/build-gpu/REVISION ]] && cp "$root/build-gpu/REVISION" "$out/revision.txt" &&
  echo "carried build: $(cat "$out/revision.txt")"
deadline=${RETRO_DEADLINE:-0}
sides_after=0
for v in RETRO_UNGATED_BATCHES RETRO_VARIANT_BATCHES RETRO_GRAPH_BATCHES; do [[ -n ${!v:-} ]] && ((sides_after++)); done
# pre_limit DEFAULT LABEL: a step before the wave runs gets DEFAULT seconds, or under RETRO_DEADLINE what is left
# less what the wave runs keep; prints the limit, or says LABEL is skipped and fails when under 10 s are left
pre_limit() {
  local limit=$1
  if ((deadline > 0)); then
    local left=$((deadline - SECONDS - 20 - ${RETRO_MAIN_MIN:-200} - ${RETRO_SIDE_MIN:-90} * sides_after))
    ((left < limit)) && limit=$left
    if ((limit < 10)); then
      echo "$2: skipped ($((deadline - SECONDS)) s left of RETRO_DEADLINE=$deadline, the wave runs keep the rest)" >&2
      return 1
    fi
  fi
  echo "$limit"
}
rc=1
if lim=$(pre_limit "${RETRO_CHECKS_TIMEOUT:-240}" checks); then
  t0=$SECONDS
  timeout "$lim" "$bin" --out "$out/checks" --checks-only --skip ClusterSelectSplit ${RETRO_CHECKS_ARGS:-} > "$out/checks.log" 2>&1
  rc=$?
  echo "checks: exit $rc ($((SECONDS - t0)) s of its $lim s)"; grep -E "^(passed|failed)|^checks:" "$out/checks/gpu-report.txt"
fi
# the split select's check in a process of its own (a faulting kernel would fail every check after it)
if lim=$(pre_limit 60 "check ClusterSelectSplit"); then
  timeout "$lim" "$bin" --out "$out/checks-split" --checks-only --filter ClusterSelectSplit > "$out/checks-split.log" 2>&1
  echo "check ClusterSelectSplit: exit $?"; grep -E "^(passed|failed)" "$out/checks-split/gpu-report.txt"
fi
# PyTorch SDPA on the same shapes, before the optional steps below (its rows are the wave run's baseline)
if lim=$(pre_limit "${RETRO_SDPA_TIMEOUT:-150}" sdpa); then
  t0=$SECONDS
  PYTHONWARNINGS=ignore timeout "$lim" python3 -B "$root/python/retro_bench/_launch.py" retro_bench.gpu.sdpa_baseline "$out/sdpa.json" --contexts "$ctx" \
    --batches "$bat" > "$out/sdpa.log" 2>&1
  echo "sdpa: exit $? ($((SECONDS - t0)) s of its $lim s)"
fi
# the checks under compute-sanitizer (the Firecracker machines run it; 10-100x slower than the checks alone)
if [[ -n ${RETRO_SANITIZER:-} ]]; then
  if ! command -v compute-sanitizer > /dev/null; then
    echo "compute-sanitizer: not on this machine"
  elif lim=$(pre_limit "${RETRO_SANITIZER_TIMEOUT:-120}" "compute-sanitizer $RETRO_SANITIZER"); then
    t0=$SECONDS
    # shellcheck disable=SC2086  # RETRO_SANITIZER_ARGS: words
    timeout "$lim" compute-sanitizer --tool "$RETRO_SANITIZER" --error-exitcode 9 "$bin" --out "$out/sanitizer" \
      --checks-only ${RETRO_SANITIZER_ARGS:-} > "$out/sanitizer.log" 2>&1
    echo "compute-sanitizer $RETRO_SANITIZER: exit $? ($((SECONDS - t0)) s of its $lim s; 9: it found errors)"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^checks:" "$out/sanitizer.log"
  fi
fi
# a build of the previous revision carried beside it (retro_gpu_check.prev) measures instead when the new
# kernels fail their checks: a lease is too short to rebuild, and a wrong kernel's times mean nothing
# (a CudnnDecode failure alone does not: it is a library the machine may lack, and its rows are left out)
if (( rc != 0 )) && grep -E "^failed" "$out/checks/gpu-report.txt" 2> /dev/null | grep -qv CudnnDecode && [[ -x $bin.prev ]]; then
  echo "checks failed: the wave run uses $bin.prev"
  "$bin.prev" --out "$out/checks-prev" --checks-only > "$out/checks-prev.log" 2>&1
  echo "checks (prev): exit $?"; grep -E "^failed|^checks:" "$out/checks-prev/gpu-report.txt"
  bin=$bin.prev
fi
# the GTest binary: carry-tests.sh's (build-gpu/retro_unit_tests + lib/) or the retro-bench pack's, unpacked
# into a scratch folder (not into the carried build-gpu/: what is unpacked there would travel next time)
tests_bin=$root/build-gpu/retro_unit_tests tests_lib=$root/build-gpu/lib
if [[ ${RETRO_PACKED_TESTS:-1} != 0 && ! -x $tests_bin && -f $root/build-gpu/retro-bench.tar.xz ]]; then
  unpacked=$(mktemp -d)
  if bash "$root/scripts/gpu/unpack-retro-bench.sh" "$root/build-gpu" "$unpacked" > /dev/null 2> "$out/unpack.log"; then
    tests_bin=$unpacked/rb/bin/retro_unit_tests tests_lib=$unpacked/rb/lib
  fi
fi
if [[ ${RETRO_PACKED_TESTS:-1} != 0 && -x $tests_bin ]] && lim=$(pre_limit "${RETRO_TESTS_TIMEOUT:-90}" "gtest CudaBackend.*"); then
  t0=$SECONDS
  LD_LIBRARY_PATH=$tests_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout "$lim" "$tests_bin" \
    --gtest_filter='CudaBackend.*' > "$out/gtest-cuda.log" 2>&1
  echo "gtest CudaBackend.*: exit $? ($((SECONDS - t0)) s of its $lim s)"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$out/gtest-cuda.log"
fi
# a microbenchmark group (retro_gpu_check --bench-only) on the same grid
if [[ -n ${RETRO_BENCH:-} ]] && lim=$(pre_limit "${RETRO_BENCH_TIMEOUT:-120}" "bench $RETRO_BENCH"); then
  t0=$SECONDS
  timeout "$lim" "$bin" --out "$out/bench" --bench-only "$RETRO_BENCH" --contexts "$ctx" \
    --batches "${RETRO_BENCH_BATCHES:-$bat}" > "$out/bench.log" 2>&1
  echo "bench $RETRO_BENCH: exit $? ($((SECONDS - t0)) s of its $lim s)"; grep -E "^(cluster_select|estimate_attention|full_decode|wave_kernels)" "$out/bench/gpu-report.txt"
fi
hwfile=$out/hardware.txt
python3 -B "$root/python/retro_bench/_launch.py" retro_bench.gpu.hardware_values "$root/configs/hardware/$hw.json" > "$hwfile" 2>/dev/null ||
  cp "$root/build-gpu/$hw.txt" "$hwfile"
# what every wave run of the call shares (the one timing rule: the same steps, warm-up and sequences in every
# row, the ungated, variant and graph rows included)
# shellcheck disable=SC2206  # RETRO_WAVE_ARGS: words
timing=(${RETRO_STEPS:+--steps "$RETRO_STEPS"} ${RETRO_WARM_STEPS:+--warm-steps "$RETRO_WARM_STEPS"}
        ${RETRO_SEQUENCES:+--sequences "$RETRO_SEQUENCES"} ${RETRO_WAVE_ARGS:-})
# Each wave run under a limit: RETRO_WAVE_TIMEOUT (default 330 s) and, with RETRO_DEADLINE=S (the seconds the
# whole call may take, counted from its start: 570 under the run tool's 600 s), no more than what is left
# before the deadline less 20 s for the tables and what the runs after it need (RETRO_SIDE_MIN, default 90 s,
# per side run still to come) — unless that leaves it under 60 s: the earlier run matters more —; a run left
# under 60 s is skipped, saying so. A binary that knows
# --time-budget starts no row in the run's last RETRO_ROW_SLACK seconds (default 60; a quarter of a shorter
# limit) and writes the rows it has (a SIGTERM at the limit does the same after the row in flight; -k 30
# kills one that hangs).
knows_budget=0
grep -qa -- --time-budget "$bin" && knows_budget=1
# wave_run NAME LABEL [VAR=VALUE ...] -- ARG ...: one run of the binary into $out/NAME (log $out/NAME.log)
wave_run() {
  local name=$1 label=$2 envs=()
  shift 2
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  local limit=${RETRO_WAVE_TIMEOUT:-330}
  if ((deadline > 0)); then
    local left=$((deadline - SECONDS - 20)) keep=$((${RETRO_SIDE_MIN:-90} * sides_after))
    # the runs after it keep their share unless that leaves this one (the more important: main first) under 60 s
    ((left - keep >= 60)) && left=$((left - keep))
    ((left < limit)) && limit=$left
    if ((limit < 60)); then
      echo "$label: skipped ($((deadline - SECONDS)) s left of RETRO_DEADLINE=$deadline)"
      return
    fi
  fi
  local slack=${RETRO_ROW_SLACK:-60} budget=()
  ((slack > limit / 4)) && slack=$((limit / 4))
  ((knows_budget)) && budget=(--time-budget $((limit - slack)))
  local t0=$SECONDS
  env "${envs[@]}" timeout -k 30 "$limit" "$bin" "${budget[@]}" --out "$out/$name" --wave-only "$@" "${timing[@]}" \
    > "$out/$name.log" 2>&1
  echo "$label: exit $? ($((SECONDS - t0)) s of its $limit s)"
  retro_pack_out "$out" > /dev/null
}
wave_run wave "wave run" -- --seeds "${RETRO_SEEDS:-quest,pq}" --contexts "$ctx" --batches "$bat" \
  --wave-kv "${RETRO_WAVE_KV:-all}" --hardware "$hwfile" --measured ${RETRO_HOST_THREADS:+--host-threads "$RETRO_HOST_THREADS"}
if [[ -n ${RETRO_UNGATED_BATCHES:-} ]]; then  # the same rows timed with the launch calls inside, side by side
  ((sides_after--))
  wave_run wave-ungated "wave run without the launch gate" -- --seeds none --no-launch-gate --contexts "$ctx" \
    --batches "$RETRO_UNGATED_BATCHES" --wave-kv gpu
fi
if [[ -n ${RETRO_VARIANT_BATCHES:-} ]]; then  # the kernel variants' rows beside the defaults'
  ((sides_after--))
  variant_env=${RETRO_VARIANT_ENV:-RETRO_SELECT_SPLIT=on}
  if [[ $variant_env == *RETRO_SELECT_SPLIT=on* ]] && ! grep -qE "^passed +ClusterSelectSplit" "$out/checks-split/gpu-report.txt"; then
    echo "ClusterSelectSplit failed: the variant rows run without the split"
    variant_env=${variant_env//RETRO_SELECT_SPLIT=on/RETRO_SELECT_SPLIT=off}
  fi
  # shellcheck disable=SC2086  # the variables, one word each
  wave_run wave-variants "wave run with $variant_env" $variant_env -- --seeds none --contexts "$ctx" \
    --batches "$RETRO_VARIANT_BATCHES" --wave-kv gpu
fi
if [[ -n ${RETRO_GRAPH_BATCHES:-} ]]; then  # the steps as CUDA graphs (and the split select), side by side
  ((sides_after--))
  graph_env=RETRO_SELECT_SPLIT=off
  grep -qE "^passed +ClusterSelectSplit" "$out/checks-split/gpu-report.txt" 2> /dev/null && graph_env=RETRO_SELECT_SPLIT=auto
  wave_run wave-graph "wave run with --step-graph ($graph_env)" $graph_env -- --seeds none --step-graph --contexts "$ctx" \
    --batches "$RETRO_GRAPH_BATCHES" --wave-kv gpu
fi
grep -v Warning "$out/sdpa.log" 2> /dev/null | grep "^sdpa"
sed -n '/^wave decode step/,$p' "$out/wave/gpu-report.txt" 2>/dev/null || grep -E "^  (\[ *[0-9.]+ s\] )?(full|wave)" "$out/wave.log" 2> /dev/null
sdpa=()  # SDPA's rows where its step ran
[[ -f "$out/sdpa.json" ]] && sdpa=(--sdpa "$out/sdpa.json")
[[ -f "$out/wave/gpu-report.json" ]] &&
  python3 -B "$root/python/retro_bench/_launch.py" retro_bench.gpu.summary_table "$out/wave/gpu-report.json" "${sdpa[@]}" |
  tee "$out/summary.md"
# whole-model tokens/s per GPU with each method's memory cap (the rows' dense_us: cuBLAS, issue 40 #5), and its
# figure where the machine's Python has matplotlib (otherwise drawn back home from the report)
figure=()
python3 -c "import matplotlib" 2> /dev/null && figure=(--figure "$out/model-throughput.png")
[[ -f "$out/wave/gpu-report.json" ]] &&
  python3 -B "$root/python/retro_bench/_launch.py" retro_bench.gpu.model_throughput "$out/wave/gpu-report.json" "${figure[@]}" |
  tee "$out/model-throughput.md"
[[ -f "$out/model-throughput.png" ]] && echo "figure: $out/model-throughput.png"
# the same table for each side run of the call (no launch gate, the kernel variants, the steps as graphs:
# item 6's batch-1 rows beside the default rows above)
for side in wave-ungated wave-variants wave-graph; do
  [[ -f "$out/$side/gpu-report.json" ]] || continue
  { echo "$side:"; python3 -B "$root/python/retro_bench/_launch.py" retro_bench.gpu.summary_table "$out/$side/gpu-report.json" \
      "${sdpa[@]}"; } 2>&1 | tee "$out/summary-$side.md"
done
# RetroInfer's Figure 15 on the device path: no cache, the update after the step, at the next step (issue 40 #2)
[[ -f "$out/wave/gpu-report.json" ]] &&
  python3 -B "$root/python/retro_bench/_launch.py" retro_bench.gpu.ablation_table "$out/wave/gpu-report.json" |
  tee "$out/ablation.md"
# the offloaded wave step against its GPU phases plus its miss bytes at the measured PCIe rate (issue 40 #2)
[[ -f "$out/wave/gpu-report.json" ]] &&
  python3 -B "$root/python/retro_bench/_launch.py" retro_bench.gpu.offload_bound "$out/wave/gpu-report.json" |
  tee "$out/offload-bound.md"
# the index built on the GPU against the CPU's k-means on the same synthetic layers (issue 40 #3): the batch-1
# wave-hbm rows beside the CPU build's, run on the VM by the emulated driver over the same window (80 steps
# after 16, 8 sequences: docs/measurements/cpu-index-parity-2026-11-30; another window is refused, saying so)
parity_ref=${RETRO_PARITY_REF:-$root/docs/measurements/cpu-index-parity-2026-11-30}
if [[ -f "$out/wave/gpu-report.json" ]] && compgen -G "$parity_ref/cpu-*/gpu-report.json" > /dev/null; then
  python3 -B "$root/python/retro_bench/_launch.py" retro_bench.gpu.index_parity --gpu "$out/wave/gpu-report.json" \
    --cpu "$parity_ref"/cpu-*/gpu-report.json 2>&1 | tee "$out/index-parity.md"
fi
left=$(( ${RETRO_LEASE_BUDGET:-560} - SECONDS ))
if command -v ncu > /dev/null && (( left > 40 )); then
  t0=$SECONDS
  timeout "$left" ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    -k 'regex:cluster|estimate|gather_clusters|page_table|device_schedule|finish_merge' \
    --launch-count 160 \
    "$bin" --out "$out/ncu-run" --wave-only --seeds none --wave-kv gpu --contexts "${RETRO_NCU_CONTEXT:-131072}" \
    --batches "${RETRO_NCU_BATCHES:-8}" \
    > "$out/ncu.csv" 2> "$out/ncu.log"
  echo "ncu: exit $? ($((SECONDS - t0)) s)"
fi
