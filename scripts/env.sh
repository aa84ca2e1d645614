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

# Configure (first time) and build with Ninja; ccache is used when present.
retro_build() {
  if [[ ! -f "$RETRO_BUILD/build.ninja" ]]; then
    cmake -S "$RETRO_ROOT" -B "$RETRO_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
  fi
  cmake --build "$RETRO_BUILD" -j "$(nproc)" >&2
}
