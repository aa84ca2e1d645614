# Sourced by the scripts that unpack header-only libraries from pinned PyPI wheels into the project's cache
# (flashinfer-headers.sh, cudnn-frontend-headers.sh): the steps they share. Only files under a prefix of
# a wheel are taken out; no code of a package is run or imported.
#   pinned_headers_begin LABEL DEST   sets PIP (a pip command) and TMP (a temporary folder beside DEST,
#                                     removed on exit); exits when no pip is found
#   pinned_wheel GLOB SHA256          prints the path of the wheel downloaded into $TMP/wheels, or fails
#                                     naming it when its SHA-256 is not the pinned one (call it in an
#                                     assignment, w=$(pinned_wheel ...), so that set -e stops the script)
#   pinned_take WHEEL PREFIX TO       copies the wheel's files under PREFIX into $TMP/TO (none: exits)
#   pinned_headers_finish DEST STAMP  writes STAMP as $TMP/.complete and moves $TMP to DEST (another
#                                     process may have finished first: its copy, the same pinned content,
#                                     is kept), then prints DEST

pinned_headers_begin() {
  PINNED_LABEL=$1
  local dest=$2 py
  PIP=()
  for py in "${RETRO_DUMP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/retro-bench/dump-venv}/bin/python" python3 /usr/bin/python3; do
    if "$py" -m pip --version >/dev/null 2>&1; then PIP=("$py" -m pip); break; fi
  done
  if ((${#PIP[@]} == 0)); then
    echo "[setup] $PINNED_LABEL: no pip found (run scripts/setup.sh first)" >&2; exit 1
  fi
  mkdir -p "$(dirname "$dest")"
  TMP=$(mktemp -d "$(dirname "$dest")/.$(basename "$dest").XXXXXX")
  trap 'rm -rf "$TMP"' EXIT
}

pinned_wheel() {
  local f
  f=$(ls "$TMP"/wheels/$1)
  if [[ "$(sha256sum "$f" | cut -d' ' -f1)" != "$2" ]]; then
    echo "[setup] $PINNED_LABEL: $f: SHA-256 is not the pinned $2" >&2; exit 1
  fi
  echo "$f"
}

pinned_take() {
  /usr/bin/python3 - "$1" "$2" "$TMP/$3" <<'PY'
import os, sys, zipfile
whl, prefix, out = sys.argv[1:4]
n = 0
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            path = os.path.join(out, name[len(prefix):])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with z.open(name) as src, open(path, "wb") as dst:
                dst.write(src.read())
            n += 1
if n == 0:
    sys.exit(f"{whl}: no files under {prefix}")
PY
}

pinned_headers_finish() {
  rm -rf "$TMP/wheels"
  echo "$2" > "$TMP/.complete"
  if ! mv -T "$TMP" "$1" 2>/dev/null; then rm -rf "$TMP"; fi
  trap - EXIT
  echo "$1"
}
