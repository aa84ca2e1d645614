#!/usr/bin/env bash
# Idempotent set-up: installs the Debian packages retro-bench needs when any is missing (--main: only
# what the quickstart's main job needs; no dumper venv, no FlashInfer headers), and makes
# sure libblas.so.3 resolves to OpenBLAS (Debian's FAISS links the generic libblas.so.3; the reference
# BLAS it may otherwise get is ~20x slower for k-means). Safe to run every time: it does nothing when
# everything is present.
set -euo pipefail

# The main job (scripts/quickstart.sh: build retro-bench, run a config) needs only these (--main).
MAIN_PKGS=(
  build-essential cmake ninja-build ccache pkg-config
  libhdf5-dev libfaiss-dev libopenblas-dev liblapack-dev libcli11-dev nlohmann-json3-dev libfmt-dev libomp-dev
  # Python methods (py:FILE:Class, docs/adding-a-method.md): retro-bench embeds the interpreter
  python3-dev pybind11-dev python3-numpy
)
# The rest is the test suite's, the Python module's, the dumper's and the figures' (scripts/test.sh).
TEST_PKGS=(
  libgtest-dev libgmock-dev libbenchmark-dev
  # the fuzz targets (tests/fuzz, docs/testing.md): clang with libFuzzer and the sanitizer run-times
  clang libclang-rt-14-dev
  python3-h5py python3-matplotlib chromium
  # the Python module (python/, docs/python.md) and its notebook examples (pandas)
  python3-pybind11 python3-pandas
  # trace dumper (scripts/dump/): CPU torch under the pinned venv, and the texts prompts are built from
  python3-venv python3-torch python3-yaml python3-requests python3-packaging python3-psutil
  r-cran-janeaustenr r-cran-tokenizers bible-kjv bible-kjv-text
  # the Slurm test (tests/cluster/, docs/cluster.md) runs its own one-node cluster from these; installing
  # them starts no daemon the test relies on (it starts munged, slurmctld, slurmd itself, by PID)
  slurmctld slurmd slurm-client munge
)
main_only=0
[[ ${1:-} == --main ]] && main_only=1
PKGS=("${MAIN_PKGS[@]}")
((main_only)) || PKGS+=("${TEST_PKGS[@]}")

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "[setup] installing: ${missing[*]}" >&2
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# Point the BLAS alternative at OpenBLAS if something else (the reference BLAS) is selected.
alt=libblas.so.3-x86_64-linux-gnu
if command -v update-alternatives >/dev/null 2>&1; then
  cur=$(update-alternatives --query "$alt" 2>/dev/null | awk '/^Value:/{print $2}')
  if [[ -n "$cur" && "$cur" != *openblas* ]]; then
    best=$(update-alternatives --list "$alt" | grep openblas | head -n1 || true)
    if [[ -n "$best" ]]; then
      echo "[setup] switching $alt from $cur to $best" >&2
      SUDO=""; if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
      $SUDO update-alternatives --set "$alt" "$best" >&2
    fi
  fi
fi

((main_only)) && exit 0
# The trace dumper's pinned virtual environment (no-op when its stamp matches).
bash "$(dirname "${BASH_SOURCE[0]}")/dump/setup_venv.sh"

# FlashInfer's decode kernel headers and the cuDNN frontend's headers, the cuda backend's full-attention
# baselines (pinned wheels, headers only), where CUDA code is built. Without them the build still works:
# "full_kernel": "flashinfer" / "cudnn" is then refused by name (kernels/*_absent.cpp).
if command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  bash "$(dirname "${BASH_SOURCE[0]}")/flashinfer-headers.sh" >/dev/null ||
    echo "[setup] WARNING: FlashInfer headers not fetched; the CUDA build will lack the library decode baseline" >&2
  bash "$(dirname "${BASH_SOURCE[0]}")/cudnn-frontend-headers.sh" >/dev/null ||
    echo "[setup] WARNING: cuDNN frontend headers not fetched; the CUDA build will lack the cuDNN decode baseline" >&2
fi
exit 0
