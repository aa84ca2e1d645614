# Sourced by the lease scripts (lease-run.sh, lease-figure12.sh): the run tool brings back at most 8 files of
# $OUT, 2 folders down, so a call's output folder comes back as one file. With RETRO_PACK_TO=DIR,
# `retro_pack_out FOLDER` writes DIR/<name of FOLDER>.tgz (whole or not at all: written aside, then renamed);
# the scripts call it after each long step and on exit, so a call cut short still returns what it had.
retro_pack_out() {
  local folder=$1 name
  [[ -n ${RETRO_PACK_TO:-} && -d $folder ]] || return 0
  name=$(basename "$folder")
  mkdir -p "$RETRO_PACK_TO" &&
    tar -C "$(dirname "$folder")" -czf "$RETRO_PACK_TO/$name.tgz.tmp" "$name" &&
    mv "$RETRO_PACK_TO/$name.tgz.tmp" "$RETRO_PACK_TO/$name.tgz" && echo "packed: $RETRO_PACK_TO/$name.tgz"
}
