#!/usr/bin/env bash
# Regenerates every paper figure on this machine (docs/plots.md):
#   1. runs each configs/paper/*.json with --resume into RESULTS/<name>/ (finished work is skipped, so a
#      second call only re-plots), then `retro-bench plot` and `retro-bench report` on it;
#      (configs/paper/ood-recall.json makes the decode-vs-key-query curves, RetrievalAttention Fig. 3a);
#   2. the trace-level figures into RESULTS/trace-figures/: `retro-bench centroid-rank`
#      (cumulative attention vs. cluster rank with the centroid estimate: RetroInfer Fig. 7) and
#      `retro-bench inspect --json` on an 8-layer synthetic trace (sparsity per layer x head: RetroInfer
#      Fig. 4a), then plot + report;
#   3. prints the time of every step and the total.
#
# usage: scripts/paper-figures.sh [--results DIR] [--only NAME[,NAME...]] [--threads N] [--no-trace-figures]
#   --results DIR        results root (default results/)
#   --only NAMES         only these configs (basenames of configs/paper/*.json, e.g. wave-zones,wave-segments);
#                        scale-1m (1M-token traces) runs only when named here
#   --threads N          worker threads for `run` (default: all cores)
#   --no-trace-figures   skip step 2
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

RESULTS="$RETRO_ROOT/results"
ONLY=""
THREADS=()
TRACE_FIGS=1
while (($#)); do
  case "$1" in
    --results) RESULTS="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --threads) THREADS=(--threads "$2"); shift 2 ;;
    --no-trace-figures) TRACE_FIGS=0; shift ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "paper-figures.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

cd "$RETRO_ROOT"   # configs name their traces relative to the repository root
if [[ ! -f "$RETRO_BUILD/build.ninja" ]]; then
  cmake -S "$RETRO_ROOT" -B "$RETRO_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
fi
cmake --build "$RETRO_BUILD" --target retro-bench >&2
BIN="$RETRO_BUILD/retro-bench"
mkdir -p "$RESULTS"

declare -a SUMMARY=()
T0=$(date +%s)
step() {  # step LABEL CMD...: run, time, remember
  local label="$1"; shift
  local s=$(date +%s)
  echo "[paper-figures] $label: $*" >&2
  "$@"
  local e=$(( $(date +%s) - s ))
  SUMMARY+=("$(printf '%-34s %6ds' "$label" "$e")")
}

for cfg in configs/paper/*.json; do
  base=$(basename "$cfg" .json)
  if [[ -n "$ONLY" && ",$ONLY," != *",$base,"* ]]; then continue; fi
  # scale-1m (1M-token traces, about an hour on 2 cores: docs/performance.md) runs only when named
  if [[ "$base" == scale-1m && ",$ONLY," != *",$base,"* ]]; then
    echo "[paper-figures] skipping $cfg (1M-token traces; --only scale-1m runs it)" >&2; continue
  fi
  name=$("$RETRO_PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["name"])' "$cfg")
  step "run $base" "$BIN" run "$cfg" --resume --results "$RESULTS" "${THREADS[@]}"
  step "plot $base" "$BIN" plot "$RESULTS/$name"
  step "report $base" "$BIN" report "$RESULTS/$name"
done

if ((TRACE_FIGS)) && [[ -z "$ONLY" || ",$ONLY," == *",trace-figures,"* ]]; then
  TRACE=datasets/generated/synth-llama3-32k-l1.h5   # made by the wave-* configs
  TF="$RESULTS/trace-figures"
  mkdir -p "$TF"
  if [[ -f "$TRACE" ]]; then
    # the ood-recall figure comes from configs/paper/ood-recall.json (results/ood-recall/), run above
    if [[ ! -f "$TF/centroid-rank-synth-llama3-32k-l1.json" ]]; then
      step "centroid-rank" "$BIN" centroid-rank "$TRACE" --kv-heads 0,1 --json "$TF/centroid-rank-synth-llama3-32k-l1.json"
    fi
    # sparsity per layer x query head: an 8-layer trace (layers are independent draws of the generator)
    ML=datasets/generated/synth-llama3-8k-l8.h5
    if [[ ! -f "$ML" ]]; then
      step "synth 8-layer trace" "$BIN" synth "$ML" --prompt-len 8192 --steps 8 --layers 8 --prefill-queries 0
    fi
    if [[ ! -f "$TF/inspect-synth-llama3-8k-l8.json" ]]; then
      step "inspect" "$BIN" inspect "$ML" --step-stride 2 --json "$TF/inspect-synth-llama3-8k-l8.json"
    fi
    step "plot trace-figures" "$BIN" plot "$TF"
    step "report trace-figures" "$BIN" report "$TF"
  else
    echo "[paper-figures] $TRACE is absent (run a wave-* config first): trace figures skipped" >&2
  fi
fi

echo
echo "step                                  time"
printf '%s\n' "${SUMMARY[@]}"
echo "total $(( $(date +%s) - T0 ))s; figures in $RESULTS/*/figures/, reports in $RESULTS/*/report.html"
