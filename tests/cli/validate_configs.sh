#!/usr/bin/env bash
# Every experiment config shipped in configs/ (hardware profiles aside) passes `retro-bench validate`, i.e.
# every check `run` makes before work (method parameters against the trace's shape, memory estimate).
# Real-model traces are dumped by hand (docs/traces.md) and are usually absent: a config whose only
# complaint is such a missing trace file is counted, not failed; synthetic traces are checked from their
# recipes without generating them. The memory estimate is checked against a fixed 16 GiB (the configs are
# meant to fit a 16 GiB machine), not against what happens to be free while the suite runs: other work
# on the machine made it fail (a 12 GiB config against 10.6 GiB available). Usage: validate_configs.sh
# RETRO_BENCH_BINARY CONFIGS_DIR
set -uo pipefail
bin=${1:?usage: validate_configs.sh RETRO_BENCH_BINARY CONFIGS_DIR}
dir=${2:?usage: validate_configs.sh RETRO_BENCH_BINARY CONFIGS_DIR}
# Configs name traces and Python method files ("py:examples/methods/...") relative to the working
# directory, which the docs take to be the repository root: validate from there (CONFIGS_DIR's parent).
dir=$(cd "$dir" && pwd)
cd "$(dirname "$dir")" || exit 1
ok=0 absent=0 nopy=0 bad=0
while IFS= read -r f; do
  if out=$("$bin" validate --max-memory 16G "$f" 2>&1); then
    ok=$((ok + 1))
  elif grep -q "INVALID: trace file not found: .* (give a \"synth\" recipe" <<<"$out" &&
       [[ $(grep -c INVALID <<<"$out") -eq 1 ]]; then
    absent=$((absent + 1))
  elif grep -q "unknown method 'py:" <<<"$out"; then
    # only a retro-bench built without Python methods (the sanitizer build) does not know "py:" names;
    # one with them loads the file and names any problem with it
    nopy=$((nopy + 1))
  else
    bad=$((bad + 1))
    echo "FAIL: $out" >&2
  fi
done < <(find "$dir" -name '*.json' -not -path '*/hardware/*' | sort)
echo "$ok config(s) valid, $absent waiting for a dumped real trace, $nopy naming Python methods this build lacks, $bad invalid"
[[ $bad -eq 0 && $ok -gt 0 ]]
