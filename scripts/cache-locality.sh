#!/usr/bin/env bash
# Cache locality from real queries (issue 40 #4; docs/performance.md "Cache locality from real queries"):
#   1. the real traces with 192 decode steps (scripts/make-real-trace.sh): SmolLM2 at 8K (~10 min on 2
#      cores) and Qwen2.5-0.5B at 32K (~1 h: its prefill; skipped with RETRO_SKIP_32K=1), and
#      the GPU driver's synthetic timing layer at several query-focus persistences `stay`
#      (tests/tools/synthetic_layer_trace.cpp; seconds each), where absent;
#   2. `retro-bench run` of wave with an LRU block cache of 1/2/5/10% of the KV on both
#      (configs/real/smollm2-cache-locality.json, configs/real/qwen2.5-32k-cache-locality.json,
#      configs/gpu/synthetic-layer-cache-locality.json);
#   3. the table: hit ratio per trace and cache size, and the `stay` whose curve is closest to each real one
#      (python/retro_bench/tools/cache_locality_table.py). Results under RESULTS (default results/).
# Usage: scripts/cache-locality.sh [RESULTS]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
results="${1:-$RETRO_ROOT/results}"
cd "$RETRO_ROOT"
retro_build retro-bench retro_synthetic_layer_trace
real=datasets/generated/smollm2-niah-mobydick-8k-s192.h5
[[ -f $real ]] || bash scripts/make-real-trace.sh datasets/recipes/niah-mobydick-8k.json "$real" --steps 192
configs=(configs/real/smollm2-cache-locality.json)
if [[ ${RETRO_SKIP_32K:-0} != 1 ]]; then
  real32=datasets/generated/qwen2.5-0.5b-niah-mobydick-32k-s192.h5
  [[ -f $real32 ]] || bash scripts/make-real-trace.sh datasets/recipes/niah-mobydick-32k.json "$real32" \
    --model qwen2.5-0.5b --steps 192
  configs+=(configs/real/qwen2.5-32k-cache-locality.json)
fi
configs+=(configs/gpu/synthetic-layer-cache-locality.json)
for stay in 0.50 0.70 0.80 0.90 0.95 0.98 0.99; do
  t=datasets/generated/synthetic-layer-32k-s192-stay$stay.h5
  [[ -f $t ]] || "$RETRO_BUILD/tests/retro_synthetic_layer_trace" "$t" --prompt 32768 --steps 192 --stay "$stay"
done
dirs=()
for c in "${configs[@]}"; do
  name=$(basename "$c" .json)
  flag=--force
  [[ -d "$results/$name" ]] && flag=--resume
  "$RETRO_BUILD/retro-bench" run "$c" --results "$results" -q $flag >/dev/null
  dirs+=("$results/$name")
done
"$RETRO_PYTHON" -B python/retro_bench/_launch.py retro_bench.tools.cache_locality_table "${dirs[@]}"
