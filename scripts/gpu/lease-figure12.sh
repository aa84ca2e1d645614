#!/usr/bin/env bash
# RetroInfer's Figure 12 on a lent GPU (issue 41 #4): `retro-bench run` itself — packed with its libraries by
# scripts/gpu/carry-retro-bench.sh into build-gpu/retro-bench.tar.xz and carried (run(carry=["build-gpu"])) —
# runs every seed method with a GPU twin (full, wave offloaded and in HBM, Quest, PQCache, MagicPIG, FAISS
# IVF and HNSW, RetrievalAttention) on the lease configs (configs/gpu/lease-every-method-32k.json, -128k.json:
# the every-method config cut to a lease), each config under its own time limit, then writes the one table
# (retro_bench.gpu.summary_table over the runner's records: tokens per layer step and wave against the
# fastest sparse baseline) and each record's accuracy beside it: its selections' recall, mass and output error,
# and the 32K closed-loop grid's NIAH accuracy at the same budget (results/closedloop-qwen2.5-0.5b-32k, committed,
# so it travels with the working tree). An interrupted config resumes on a second
# call (--resume): its finished points are kept.
# usage: bash scripts/gpu/lease-figure12.sh OUTDIR [CONFIG ...]
#   RETRO_FIG12_TIMEOUT=S   seconds per config (default 250)
#   RETRO_THREADS=N         retro-bench's --threads (default: the machine's cores)
#   RETRO_BENCH_BIN=PATH    this retro-bench instead of the carried pack's (the suite's test: the emulated one)
#   RETRO_PACK_TO=DIR       OUTDIR packed as DIR/<name of OUTDIR>.tgz after each config and at the end (the run
#                           tool brings back 8 files of $OUT, 2 folders down: RETRO_PACK_TO=$OUT, OUTDIR elsewhere)
set -uo pipefail
out=${1:?usage: lease-figure12.sh OUTDIR [CONFIG ...]}
shift
export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-EAGER}  # as lease-run.sh: no module load inside a timed step
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/scripts/gpu/pack-out.sh"
trap 'retro_pack_out "$out"' EXIT
trap 'exit 143' TERM INT
mkdir -p "$out" && out=$(cd "$out" && pwd)  # absolute: the script works from the repository root
cd "$root"  # configs/hardware and the configs' relative trace paths
configs=("$@")
((${#configs[@]})) || configs=(configs/gpu/lease-every-method-32k.json configs/gpu/lease-every-method-128k.json)
if [[ -n ${RETRO_BENCH_BIN:-} ]]; then
  rb=$RETRO_BENCH_BIN
else
  rb=$(bash scripts/gpu/unpack-retro-bench.sh build-gpu 2> "$out/unpack.log") || { cat "$out/unpack.log"; exit 1; }
  cp "$(dirname "$rb")/REVISION" "$out/revision.txt" 2>/dev/null
fi
source scripts/gpu/cudnn-env.sh  # cuDNN and cuBLAS from PyTorch's wheels, where the runs load them
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > "$out/device.txt" 2>&1
nproc > "$out/cores.txt"
threads=${RETRO_THREADS:-$(nproc)}
limit=${RETRO_FIG12_TIMEOUT:-250}
for cfg in "${configs[@]}"; do
  name=$(basename "$cfg" .json)
  t0=$SECONDS
  timeout --signal=TERM --kill-after=20 "$limit" "$rb" run "$cfg" --results "$out/results" --threads "$threads" --resume \
    > "$out/$name.log" 2>&1
  echo "$name: exit $? ($((SECONDS - t0)) s)"
  tail -3 "$out/$name.log"
  retro_pack_out "$out" > /dev/null
done
dirs=()
for d in "$out"/results/*/; do [[ -f $d/runs.jsonl ]] && dirs+=("$d"); done
if ((${#dirs[@]})); then
  PYTHONPATH=python python3 -m retro_bench.gpu.summary_table "${dirs[@]}" > "$out/summary.md" 2> "$out/summary.err"
  PYTHONPATH=python python3 -m retro_bench.gpu.accuracy_table "${dirs[@]}" --closed-loop results/closedloop-qwen2.5-0.5b-32k \
    > "$out/accuracy.md" 2>> "$out/summary.err"
  cat "$out/summary.md" "$out/accuracy.md"
else
  echo "no records: see $out/*.log"
fi
