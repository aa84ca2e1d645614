#!/usr/bin/env bash
# CI's mutation fuzzing of the trace reader (ctest fuzz.trace_reader_mutations, label fuzz; docs/testing.md).
#
#   fuzz_trace_reader_ci.sh FUZZER SECONDS RETRO_BENCH CORPUS WORKDIR
#
# Fuzzes HDF5 files mutated from CORPUS for SECONDS in fork mode, going on past crashes, timeouts and
# OOMs (HDF5 1.10.8 itself crashes and hangs on some corrupt files: tests/fuzz/hdf5-findings/), then
# judges every input the fuzzer flagged, and fails unless each is a fault of HDF5 that retro-bench handles:
#   crash-*            replayed alone through the fuzz target, the sanitizer's report must put the fault
#                      inside libhdf5 (its first frame that is not libc or a sanitizer interceptor, named
#                      or plain: `free` of the fuzzer binary), and the
#                      release `retro-bench validate` must end with exit 2 naming the file (the crash guard's
#                      "HDF5 crashed reading its metadata", or HDF5 read garbage and the reader refused it;
#                      ASan's poisoned memory makes some HDF5 reads of freed memory fault only under ASan).
#                      A fault in retro-bench's code, or one the release binary dies of, fails the test.
#                      An input that does not crash when replayed alone (state left by earlier inputs of
#                      its job) must still be handled: validate and inspect exit 0 or 2.
#   timeout-*, oom-*, leak-*   `validate` and `inspect` end (within 120 s) with exit 0 or 2, never a signal.
# Prints executions and coverage. New corpus inputs stay in WORKDIR, never in the committed corpus; a
# failing input is kept under WORKDIR/artifacts/ (add it to tests/fuzz/hdf5-findings/ once handled).
set -uo pipefail
if [[ $# -ne 5 ]]; then
  echo "usage: $0 FUZZER SECONDS RETRO_BENCH CORPUS WORKDIR" >&2
  exit 2
fi
fuzzer=$1 seconds=$2 bench=$3 corpus=$4 work=$5
for f in "$fuzzer" "$bench"; do
  if [[ ! -x "$f" ]]; then
    echo "FAIL: $f is not an executable (build the main tree first: scripts/test.sh does)" >&2
    exit 1
  fi
done
# The sanitizer options CI uses (third-party suppressions: HDF5 leaks small buffers on its error paths),
# also when this runs by hand through ctest.
if [[ -z "${LSAN_OPTIONS:-}" ]]; then
  source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/env.sh" >/dev/null
  retro_sanitizer_env
fi
rm -rf "$work"
mkdir -p "$work/new" "$work/artifacts"
log="$work/fuzz.log"
"$fuzzer" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -timeout=10 -rss_limit_mb=2048 \
  -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
  "$work/new" "$corpus" >"$log" 2>&1
rc=$?
# fork mode's progress lines: "#<execs>: cov: <edges> ft: <features> corp: <inputs> exec/s: ... "
last=$(grep -E '^#[0-9]+: cov: ' "$log" | tail -1)
echo "trace reader, fork mode, ${seconds} s: ${last:-no progress line}"
# With -ignore_* fork mode exits non-zero when it saw a timeout (70) or crash: the inputs are judged
# below. The run itself must have fuzzed (progress lines) and ended on its time limit.
if [[ -z "$last" ]] || ! grep -q "INFO: fuzzed for" "$log"; then
  echo "FAIL: the fuzzer did not run its course (exit $rc); its log:" >&2
  tail -40 "$log" >&2
  exit 1
fi

# Input $a (validate's exit in $vrc): validate and inspect end with exit 0 or 2, no signal, no hang.
handled() {
  out2=$(RETRO_HDF5_TIMEOUT=5 timeout 120 "$bench" inspect "$a" 2>&1)
  irc=$?
  [[ ($vrc -eq 0 || $vrc -eq 2) && ($irc -eq 0 || $irc -eq 2) ]]
}

fail=0
shopt -s nullglob
flagged=("$work"/artifacts/*)
echo "inputs flagged by the fuzzer: ${#flagged[@]}"
for a in "${flagged[@]}"; do
  name=$(basename "$a")
  out=$(RETRO_HDF5_TIMEOUT=5 timeout 120 "$bench" validate "$a" 2>&1)
  vrc=$?
  if [[ "$name" == crash-* ]]; then
    report=$("$fuzzer" -runs=1 "$a" 2>&1)
    if grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|deadly signal" <<<"$report"; then
      # (clang links ASan's interceptors into the fuzzer: they show as plain "in free (/path/fuzzer+0x..)",
      # a C library name with the binary and no source line; a free() of a bad pointer by HDF5 has one)
      first=$(grep -E '^ *#[0-9]+ ' <<<"$report" |
              grep -vE 'libc\.so|/sysdeps/|string/\.\./|__interceptor_|__asan|__sanitizer|__lsan' |
              grep -vE ' in (free|malloc|calloc|realloc|reallocarray|memalign|posix_memalign|aligned_alloc|valloc|memcpy|memmove|memset|memcmp|strlen|strnlen|strcmp|strncmp|strcpy|strncpy|strdup) \(' |
              head -1)
      if [[ "$first" == *libhdf5* && $vrc -eq 2 && "$out" == *"$a"* ]]; then
        echo "  $name: a fault inside HDF5 ($(sed -E 's/^ *#[0-9]+ +0x[0-9a-f]+ +//' <<<"$first" | cut -c1-80));" \
             "retro-bench validate: exit 2, $(tail -1 <<<"$out" | sed 's/.*: //' | cut -c1-70)"
      else
        echo "FAIL: $name: a fault outside HDF5 or not handled (validate exit $vrc); first frame: $first" >&2
        grep -A30 -E "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" <<<"$report" | head -40 >&2
        echo "$out" | tail -3 >&2
        fail=1
      fi
    elif handled; then
      echo "  $name: does not crash replayed alone; validate exit $vrc, inspect exit $irc"
    else
      echo "FAIL: $name: validate exit $vrc, inspect exit $irc (expected 0 or 2)" >&2
      fail=1
    fi
  elif handled; then
    echo "  $name: validate exit $vrc, inspect exit $irc"
  else
    echo "FAIL: $name: validate exit $vrc, inspect exit $irc (expected 0 or 2, no signal, no hang):" >&2
    echo "$out" | tail -3 >&2
    echo "$out2" | tail -3 >&2
    fail=1
  fi
done
exit $fail
