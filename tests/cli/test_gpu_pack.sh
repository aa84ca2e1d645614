#!/usr/bin/env bash
# The retro-bench pack for a lent GPU machine (scripts/gpu/carry-retro-bench.sh, unpack-retro-bench.sh): packed
# from the build, unpacked elsewhere, the packed retro-bench runs a small CPU config from an empty environment
# (env -i: no PATH entries of the build, no LD_LIBRARY_PATH) through its own libraries and writes the same
# records' accuracy as the build's binary; a cuda config is refused for want of a device before any work.
# A lease cannot rebuild: a pack that misses a library fails here, not there.
# usage: test_gpu_pack.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
RETRO_CARRY_DIR=$tmp/carry RETRO_XZ_LEVEL=0 bash "$src/scripts/gpu/carry-retro-bench.sh" "$build" > "$tmp/carry.log"
[[ -f $tmp/carry/retro-bench.tar.xz ]] || { echo "FAIL: no pack"; cat "$tmp/carry.log"; exit 1; }
launcher=$(bash "$src/scripts/gpu/unpack-retro-bench.sh" "$tmp/carry" "$tmp/un" 2> "$tmp/unpack.log") ||
  { echo "FAIL: unpack"; cat "$tmp/unpack.log"; exit 1; }
[[ $launcher == "$tmp/un/rb/retro-bench" && ! -e $tmp/carry/rb ]] ||
  { echo "FAIL: unpacked into $launcher (the carried folder must stay as packed)"; exit 1; }
# on a machine without xz: Python's tarfile unpacks the same files
mkdir "$tmp/bin"
for t in bash sh mkdir rm tar chmod ldd grep dirname mktemp cat sed head; do ln -s "$(command -v "$t")" "$tmp/bin/$t"; done
ln -s /usr/bin/python3 "$tmp/bin/python3"
PATH=$tmp/bin bash "$src/scripts/gpu/unpack-retro-bench.sh" "$tmp/carry" "$tmp/un-py" > /dev/null 2> "$tmp/unpack-py.log" ||
  { echo "FAIL: unpack without xz"; cat "$tmp/unpack-py.log"; exit 1; }
diff -r "$tmp/un/rb" "$tmp/un-py/rb" > /dev/null || { echo "FAIL: unpacked without xz, other files"; exit 1; }
# every library but glibc's inside the pack
outside=$(LD_LIBRARY_PATH=$tmp/un/rb/lib ldd "$tmp/un/rb/bin/retro-bench" | awk '/=>/{print $1, $3}' |
  grep -vE '^(libc\.so|libm\.so|libresolv|libpthread|libdl|librt|linux-vdso|ld-linux)' | grep -v " $tmp/un/rb/lib/" || true)
[[ -z $outside ]] || { echo "FAIL: resolved outside the pack: $outside"; exit 1; }
cat > "$tmp/tiny.json" <<JSON
{"name": "packed", "traces": [{"path": "$tmp/t.h5", "synth": {"preset": "llama3-8b", "num_layers": 1, "prompt_len": 1024, "decode_steps": 2, "seed": 1}}],
 "kv_heads": [0], "hardware": "a100-80gb-pcie4",
 "methods": [{"name": "full"}, {"name": "faiss_ivf", "params": {"k": 64, "nlist": 16}}, {"name": "pq", "params": {"k": 64}}]}
JSON
(cd "$src" && env -i HOME="$tmp" PATH=/usr/bin:/bin "$launcher" run "$tmp/tiny.json" --results "$tmp/packed" > "$tmp/run.log" 2>&1) ||
  { echo "FAIL: the packed retro-bench run"; cat "$tmp/run.log"; exit 1; }
(cd "$src" && "$build/retro-bench" run "$tmp/tiny.json" --results "$tmp/built" > "$tmp/run-built.log" 2>&1) ||
  { echo "FAIL: the build's run"; cat "$tmp/run-built.log"; exit 1; }
acc() { /usr/bin/python3 -c "
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l); print(r['method'], json.dumps({k: r['metrics'][k]['mean'] for k in ('recall@100','mass','out_err')}, sort_keys=True))" "$1" | sort; }
[[ "$(acc "$tmp/packed/packed/runs.jsonl")" == "$(acc "$tmp/built/packed/runs.jsonl")" ]] ||
  { echo "FAIL: the packed run's accuracy differs from the build's"; acc "$tmp/packed/packed/runs.jsonl"; acc "$tmp/built/packed/runs.jsonl"; exit 1; }
cat > "$tmp/tiny-cuda.json" <<JSON
{"name": "packed-cuda", "traces": ["$tmp/t.h5"], "kv_heads": [0], "hardware": "measured", "backend": "cuda",
 "methods": [{"name": "full"}, {"name": "faiss_ivf", "params": {"k": 64, "nlist": 16, "placement": "cpu_attention"}}]}
JSON
set +e
(cd "$src" && env -i HOME="$tmp" PATH=/usr/bin:/bin "$launcher" run "$tmp/tiny-cuda.json" --results "$tmp/packed" > "$tmp/cuda.log" 2>&1)
rc=$?
set -e
if (( rc == 0 )); then echo "note: a CUDA device is present: the cuda config ran"; else
  grep -q "backend 'cuda': no usable CUDA device" "$tmp/cuda.log" || { echo "FAIL: cuda refusal"; cat "$tmp/cuda.log"; exit 1; }
  [[ ! -d $tmp/packed/packed-cuda ]] || { echo "FAIL: the refused cuda run wrote results"; exit 1; }
fi
echo "PASS: packed $(du -h "$tmp/carry/retro-bench.tar.xz" | cut -f1), unpacked with and without xz, ran from env -i, accuracy equal to the build's"
