#!/usr/bin/env bash
# Submit a sharded retro-bench sweep to Slurm (docs/cluster.md):
#   scripts/slurm/sweep.sh CONFIG [sbatch options...]
# submits a job array, one task per shard, each running
#   retro-bench run CONFIG --shard $SLURM_ARRAY_TASK_ID/$SHARDS --resume --results $RESULTS
# into the shared results directory, plus a merge job that starts when every task succeeded
# (--dependency=afterok). Extra arguments go to both sbatch calls (e.g. --account=..., --qos=...).
# Run it from the directory the config's relative trace paths refer to, on the shared filesystem: the
# jobs run there. Prints "array JOBID" and "merge JOBID".
#
# Knobs (environment variables):
#   SHARDS=4          number of shards (array tasks); keep it for reruns, it fixes the assignment
#   ONLY=             array indices to (re)submit, e.g. ONLY=2 or ONLY=1,3: rerun failed shards alone
#   CPUS_PER_TASK=4   cores per shard (the shard's --threads)
#   GPUS_PER_TASK=    GPUs per shard (--gres=gpu:N); default 1 for "backend": "cuda" configs, else none
#   PARTITION=        partition (default: the cluster's default partition)
#   TIME=             time limit per shard, sbatch --time format (default: the partition's)
#   MEM=              memory per shard, sbatch --mem format (default: the partition's)
#   RESULTS=results   results root (results go to $RESULTS/<config name>/)
#   RETRO_BENCH=      the retro-bench binary (default: this checkout's build)
#   LOG_DIR=          Slurm output files (default: $RESULTS/slurm-logs)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
config=${1:?usage: sweep.sh CONFIG [sbatch options...]}
shift
[[ -f "$config" ]] || { echo "sweep.sh: config not found: $config" >&2; exit 2; }
SHARDS=${SHARDS:-4}
[[ "$SHARDS" =~ ^[1-9][0-9]*$ ]] || { echo "sweep.sh: SHARDS='$SHARDS': expected a positive integer" >&2; exit 2; }
CPUS_PER_TASK=${CPUS_PER_TASK:-4}
RESULTS=${RESULTS:-results}
RETRO_BENCH=${RETRO_BENCH:-$here/../../build/retro-bench}
RETRO_BENCH=$(readlink -f "$RETRO_BENCH")
[[ -x "$RETRO_BENCH" ]] || { echo "sweep.sh: retro-bench binary not found: $RETRO_BENCH (set RETRO_BENCH)" >&2; exit 2; }
py=${RETRO_PYTHON:-python3}
read -r name backend experiment < <("$py" -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c["name"], c.get("backend","cpu"), c.get("experiment","replay"))' "$config")
if [[ -z "${GPUS_PER_TASK:-}" ]]; then
  GPUS_PER_TASK=0
  [[ "$backend" == cuda ]] && GPUS_PER_TASK=1
fi
array="0-$((SHARDS - 1))"
if [[ -n "${ONLY:-}" ]]; then
  for i in ${ONLY//,/ }; do
    [[ "$i" =~ ^[0-9]+$ && "$i" -lt "$SHARDS" ]] || { echo "sweep.sh: ONLY='$ONLY': shard $i is not in 0..$((SHARDS - 1))" >&2; exit 2; }
  done
  array=$ONLY
fi
LOG_DIR=${LOG_DIR:-$RESULTS/slurm-logs}
mkdir -p "$LOG_DIR"

common=()
[[ -n "${PARTITION:-}" ]] && common+=(--partition="$PARTITION")
shard_opts=(--array="$array" --cpus-per-task="$CPUS_PER_TASK" --output="$LOG_DIR/$name-shard-%a-of-$SHARDS-%A.out")
[[ -n "${TIME:-}" ]] && shard_opts+=(--time="$TIME")
[[ -n "${MEM:-}" ]] && shard_opts+=(--mem="$MEM")
[[ "$GPUS_PER_TASK" != 0 ]] && shard_opts+=(--gres="gpu:$GPUS_PER_TASK")

array_id=$(sbatch --parsable "${common[@]}" "${shard_opts[@]}" "$@" \
  "$here/shard.sbatch" "$RETRO_BENCH" "$config" "$RESULTS" "$SHARDS")
array_id=${array_id%%;*}
if [[ "$experiment" == closed-loop ]]; then  # its shards are groups of cases; the last one aggregates
  echo "array $array_id"
  echo "merge none (closed loop: the shard that completes the grid writes runs.jsonl)"
  exit 0
fi
merge_id=$(sbatch --parsable "${common[@]}" --dependency="afterok:$array_id" --kill-on-invalid-dep=yes --cpus-per-task=1 \
  --output="$LOG_DIR/$name-merge-%j.out" "$@" "$here/merge.sbatch" "$RETRO_BENCH" "$RESULTS/$name")
merge_id=${merge_id%%;*}
echo "array $array_id"
echo "merge $merge_id"
