# Sourced by the scripts: where the build lives and which Python the project's scripts use.
# Debian's python3-numpy/h5py/matplotlib are installed by setup.sh for /usr/bin/python3; the python3
# first on PATH may be another build that cannot see them, so scripts use this one deliberately.
RETRO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RETRO_BUILD="${RETRO_BUILD:-$RETRO_ROOT/build}"
RETRO_PYTHON="${RETRO_PYTHON:-/usr/bin/python3}"
export RETRO_ROOT RETRO_BUILD RETRO_PYTHON

# ccache: paths inside the checkout are hashed relative to the build directory, so a second checkout
# (a clone, a git worktree) reuses the first one's objects.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$RETRO_ROOT}"

# Configure (first time) and build with Ninja; ccache is used when present. Arguments: the targets to
# build (default: all; the quickstart builds only retro-bench, the test command everything).
# retro_configure main|full: configures build/ for the quickstart's program alone (main: no tests, no
# benchmarks, no CUDA kernels unless RETRO_CUDA says so; only where build/ is not configured yet) or for
# the whole suite (full: tests, benchmarks, CUDA where nvcc is; a main configuration is widened once).
retro_configure() {
  local cache="$RETRO_BUILD/CMakeCache.txt" args=(-DCMAKE_BUILD_TYPE=Release)
  if [[ $1 == main ]]; then
    [[ -f "$RETRO_BUILD/build.ninja" ]] && return 0
    args+=(-DRETRO_BUILD_TESTS=OFF -DRETRO_BUILD_BENCHMARKS=OFF "-DRETRO_CUDA=${RETRO_CUDA:-OFF}")
  else
    local cuda="${RETRO_CUDA:-AUTO}"
    if [[ -f "$RETRO_BUILD/build.ninja" ]] && grep -q '^RETRO_BUILD_TESTS:BOOL=ON$' "$cache" &&
      grep -q '^RETRO_BUILD_BENCHMARKS:BOOL=ON$' "$cache" && grep -q "^RETRO_CUDA:STRING=$cuda\$" "$cache"; then
      return 0
    fi
    args+=(-DRETRO_BUILD_TESTS=ON -DRETRO_BUILD_BENCHMARKS=ON "-DRETRO_CUDA=$cuda")
  fi
  cmake -S "$RETRO_ROOT" -B "$RETRO_BUILD" -G Ninja "${args[@]}" >&2
}

retro_build() {
  [[ -f "$RETRO_BUILD/build.ninja" ]] || retro_configure full
  local targets=()
  (($# > 0)) && targets=(--target "$@")
  cmake --build "$RETRO_BUILD" -j "$(nproc)" "${targets[@]}" >&2
}

# The sanitizer build (scripts/test.sh, docs/testing.md): ASan + UBSan, no CUDA, no benchmarks, no Python
# module (its tests are not run under ASan), -O1 with line tables (readable reports at a bearable speed),
# asserts on.
RETRO_BUILD_ASAN="${RETRO_BUILD_ASAN:-$RETRO_ROOT/build-asan}"
RETRO_BUILD_FUZZ="${RETRO_BUILD_FUZZ:-$RETRO_ROOT/build-fuzz}"
export RETRO_BUILD_ASAN RETRO_BUILD_FUZZ
retro_build_asan() {
  if [[ ! -f "$RETRO_BUILD_ASAN/build.ninja" ]]; then
    cmake -S "$RETRO_ROOT" -B "$RETRO_BUILD_ASAN" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
      -DRETRO_SANITIZE=address,undefined -DRETRO_CUDA=OFF -DRETRO_BUILD_BENCHMARKS=OFF \
      -DRETRO_PYTHON_MODULE=OFF >&2
  fi
  cmake --build "$RETRO_BUILD_ASAN" -j "$(nproc)" >&2
}

# The GPU-only build (cmake/gpu_only.cmake; what scripts/gpu-check.sh builds on a GPU machine).
# retro_nvcc prints nvcc's path ("" when there is none: nothing to compile).
RETRO_BUILD_GPU_ONLY="${RETRO_BUILD_GPU_ONLY:-$RETRO_ROOT/build-gpu-only}"
export RETRO_BUILD_GPU_ONLY
retro_nvcc() { command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true; }
retro_build_gpu_only() {
  local nvcc
  nvcc=$(retro_nvcc)
  if [[ ! -f "$RETRO_BUILD_GPU_ONLY/build.ninja" ]]; then
    cmake -S "$RETRO_ROOT" -B "$RETRO_BUILD_GPU_ONLY" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRETRO_GPU_ONLY=ON \
      -DCMAKE_CUDA_COMPILER="$nvcc" >&2
  fi
  cmake --build "$RETRO_BUILD_GPU_ONLY" -j "$(nproc)" --target retro_gpu_check >&2
}

# The libFuzzer build (tests/fuzz): Debian's clang, the library and the fuzz targets only.
retro_build_fuzz() {
  if [[ ! -f "$RETRO_BUILD_FUZZ/build.ninja" ]]; then
    cmake -S "$RETRO_ROOT" -B "$RETRO_BUILD_FUZZ" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
      -DRETRO_FUZZ=ON -DRETRO_CUDA=OFF >&2
  fi
  cmake --build "$RETRO_BUILD_FUZZ" -j "$(nproc)" >&2
}

# Sanitizer run-time options: abort on the first finding, with a stack; suppressions only for
# third-party libraries (tests/sanitizers/*.supp say why each one is there).
retro_sanitizer_env() {
  local supp="$RETRO_ROOT/tests/sanitizers"
  export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:suppressions=$supp/asan.supp"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
}
