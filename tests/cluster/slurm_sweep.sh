#!/usr/bin/env bash
# A sharded sweep on a real (one-node, throw-away) Slurm cluster (ctest label "cluster", docs/cluster.md):
#   1. starts munged + slurmctld + slurmd in a temporary directory (scripts/slurm/local-cluster.sh),
#   2. runs a tiny config on one machine, then submits it with scripts/slurm/sweep.sh as 4 shards,
#      waits for the merge job and compares the merged results with the one-machine run (equal metrics),
#   3. submits it again, kills one shard mid-run (SIGKILL), shows the merge refused naming that shard,
#      reruns that shard alone (ONLY=i) and compares again,
#   4. submits a closed-loop config (the tiny random Llama, three own cases, two sharing a prefix) as 2
#      shards: no merge job, the last shard writes runs.jsonl with every case (skipped without the dump venv),
#   5. stops every daemon it started, by PID, on every exit path (trap).
# Exit 77 (ctest: skipped) only when Slurm cannot be installed here.
# Usage: slurm_sweep.sh RETRO_BENCH_BINARY
set -euo pipefail
bin=$(readlink -f "${1:?usage: slurm_sweep.sh RETRO_BENCH_BINARY}")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/scripts/env.sh"
cluster="$root/scripts/slurm/local-cluster.sh"

work=$(mktemp -d /tmp/retro_slurm_XXXXXX)
cleanup() {
  bash "$cluster" stop "$work/cluster" || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start() { bash "$cluster" start "$work/cluster" >"$work/cluster.env"; }
rc=0
start || rc=$?
if [[ $rc -eq 77 ]]; then  # not installed: try the project's set-up (it lists slurm-wlm and munge)
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    bash "$root/scripts/setup.sh" >&2 || true
    rc=0
    start || rc=$?
  fi
  if [[ $rc -eq 77 ]]; then echo "SKIPPED: Slurm (slurm-wlm, munge) cannot be installed or run here"; exit 77; fi
fi
[[ $rc -eq 0 ]] || { echo "FAIL: the local Slurm cluster did not start" >&2; exit 1; }
source "$work/cluster.env"
echo "cluster up: $(sinfo -h -o '%P %t %c CPUs')"

cd "$work"
# 2 layers x 3 KV heads, 6 runs = 36 units; a few seconds per shard on one core
cat >sweep.json <<'EOF'
{
  "name": "tiny-sweep",
  "traces": [{"path": "t.h5", "synth": {"preset": "smollm2", "num_layers": 2, "prompt_len": 3000,
                                       "decode_steps": 12, "prefill_queries": 0, "seed": 5}}],
  "metrics": {"recall_k": [10, 100]},
  "methods": [{"name": "full"}, {"name": "oracle_topk", "params": {"k": [10, 100]}},
              {"name": "streaming", "params": {"sink": 4, "window": 64}},
              {"name": "wave", "params": {"estimation": [0.232, 0]}}]
}
EOF

"$bin" run sweep.json --results one -q --threads 1 >/dev/null

job_state() { scontrol -o show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -n1; }
wait_done() {  # JOBID TIMEOUT_S: waits until the job (every array task) left the queue; prints its state
  local id=$1 t=$2
  for _ in $(seq $((t * 5))); do
    [[ -z "$(squeue -h -j "$id" 2>/dev/null)" ]] && { job_state "$id"; return 0; }
    sleep 0.2
  done
  echo "TIMEOUT"
}
submit() {  # RESULTS_ROOT [env...]: sweep.sh as 4 shards, one core each; sets array_id, merge_id
  local out
  out=$(env SHARDS=4 CPUS_PER_TASK=1 RESULTS="$1" RETRO_BENCH="$bin" "${@:2}" bash "$root/scripts/slurm/sweep.sh" sweep.json)
  array_id=$(awk '/^array/{print $2}' <<<"$out")
  merge_id=$(awk '/^merge/{print $2}' <<<"$out")
  [[ -n "$array_id" && -n "$merge_id" ]] || { echo "FAIL: sweep.sh printed: $out" >&2; exit 1; }
}

# ---- a whole sweep as 4 shards ----
submit sharded
state=$(wait_done "$merge_id" 90)
[[ "$state" == COMPLETED ]] || { echo "FAIL: merge job $merge_id ended $state" >&2; tail -n 20 sharded/slurm-logs/* >&2; exit 1; }
"$RETRO_PYTHON" "$root/tests/cluster/same_results.py" one/tiny-sweep sharded/tiny-sweep
sessions=$(ls sharded/tiny-sweep/shards | wc -l)
[[ "$sessions" -eq 4 ]] || { echo "FAIL: $sessions shard session files, expected 4" >&2; exit 1; }
echo "PASS: 4-shard sweep merged by job $merge_id equals the one-machine run"

# ---- kill shard 1 mid-run, merge refused naming it, rerun it alone ----
# Deterministic "mid-run": shard 1 runs through a wrapper that freezes it (SIGSTOP) as soon as it wrote its
# first part file, so the SIGKILL below lands while units are left (polling from here raced a fast shard to
# its end about one time in five). The merge job calls the wrapper too: outside an array task it is the
# binary itself.
cat >freeze-shard1.sh <<EOF
#!/usr/bin/env bash
[[ "\${SLURM_ARRAY_TASK_ID:-}" == 1 ]] || exec "$bin" "\$@"
"$bin" "\$@" & pid=\$!
until grep -lqs '"shard":"1/4"' "\$4"/tiny-sweep/parts/*/*.json; do  # \$4: --results (shard.sbatch)
  kill -0 \$pid 2>/dev/null || break
  sleep 0.005
done
kill -STOP \$pid 2>/dev/null && touch "$work/frozen"
wait \$pid
EOF
chmod +x freeze-shard1.sh
killed_sweep() {  # RESULTS_ROOT: submits with shard 1 frozen after its first part, SIGKILLs it; 0 = merge refused
  rm -f frozen
  submit "$1" RETRO_BENCH="$work/freeze-shard1.sh"
  victim="${array_id}_1"
  for _ in $(seq 1200); do [[ -e frozen ]] && break; sleep 0.05; done
  [[ -e frozen ]] || { echo "FAIL: shard 1 never wrote a part file" >&2; tail -n 20 "$1"/slurm-logs/* >&2; exit 1; }
  scancel --signal=KILL --full "$victim"
  wait_done "$array_id" 90 >/dev/null
  vstate=$(job_state "$victim")
  [[ "$vstate" != COMPLETED ]] || { echo "FAIL: shard 1 completed although it was killed" >&2; exit 1; }
  mstate=$(wait_done "$merge_id" 30)
  [[ "$mstate" != COMPLETED ]] || { echo "FAIL: the merge job ran although shard 1 failed" >&2; exit 1; }
  ! "$bin" merge "$1/tiny-sweep" >merge.out 2>&1
}
# On a badly overloaded machine the freeze can still come after shard 1's last unit: then every part is
# there and merge rightly accepts; that run proves nothing, so it is repeated in a fresh directory.
killed=""
for attempt in 1 2 3; do
  if killed_sweep "killed$attempt"; then killed="killed$attempt"; break; fi
  echo "note: shard 1 had finished all its units before the freeze (attempt $attempt); again"
done
[[ -n "$killed" ]] || { echo "FAIL: merge accepted a sweep with a killed shard (3 attempts)" >&2; cat merge.out >&2; exit 1; }
grep -q "rerun shard 1/4" merge.out || { echo "FAIL: merge refusal does not name shard 1/4:" >&2; cat merge.out >&2; exit 1; }
echo "PASS: shard $victim killed mid-run ($vstate); merge refused: $(head -c 200 merge.out)..."
submit "$killed" ONLY=1
state=$(wait_done "$merge_id" 90)
[[ "$state" == COMPLETED ]] || { echo "FAIL: merge job after the rerun ended $state" >&2; tail -n 20 "$killed"/slurm-logs/* >&2; exit 1; }
"$RETRO_PYTHON" "$root/tests/cluster/same_results.py" one/tiny-sweep "$killed/tiny-sweep"
echo "PASS: shard 1 rerun alone completed the sweep"

# ---- a closed-loop config as 2 shards of cases (needs the dump venv, as the closed-loop tests) ----
if [[ -x "${RETRO_DUMP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/retro-bench/dump-venv}/bin/python" || -n "${RETRO_CLOSED_LOOP_PYTHON:-}" ]]; then
  "$RETRO_PYTHON" - <<'PY'
import json, random
r = random.Random(3)
ids = lambda n: [r.randrange(3, 512) for _ in range(n)]
a = ids(150)
cases = [a, a[:64] + ids(90), ids(150)]
with open("cl-cases.jsonl", "w") as f:
    for p in cases:
        f.write(json.dumps({"prompt_ids": p, "answers": ["x"], "max_new_tokens": 2}) + "\n")
json.dump({"name": "tiny-cl", "experiment": "closed-loop", "model": "tiny-random-llama", "prefill_queries": 16,
           "prefill_chunk": 64, "threads": 2, "cases": "cl-cases.jsonl",
           "methods": [{"name": "oracle_topk", "params": {"k": [8, 100000]}}]}, open("cl.json", "w"))
PY
  out=$(env SHARDS=2 CPUS_PER_TASK=1 RESULTS=clres RETRO_BENCH="$bin" bash "$root/scripts/slurm/sweep.sh" cl.json)
  array_id=$(awk '/^array/{print $2}' <<<"$out")
  grep -q "^merge none" <<<"$out" || { echo "FAIL: sweep.sh on a closed-loop config printed: $out" >&2; exit 1; }
  state=$(wait_done "$array_id" 120)
  [[ "$state" == COMPLETED ]] || { echo "FAIL: closed-loop shards ended $state" >&2; tail -n 30 clres/slurm-logs/* >&2; exit 1; }
  n=$("$RETRO_PYTHON" -c 'import json; r=[json.loads(l) for l in open("clres/tiny-cl/runs.jsonl")]; print(len(r), *sorted({x["task"]["cases"] for x in r}))')
  [[ "$n" == "3 3" ]] || { echo "FAIL: closed-loop runs.jsonl: expected 3 records of 3 cases, got '$n'" >&2; exit 1; }
  echo "PASS: a closed-loop config as 2 Slurm shards; the last one aggregated every case"
else
  echo "note: no dump venv: the closed-loop shards were not tried"
fi
