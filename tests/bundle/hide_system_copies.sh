# shellcheck shell=bash
# Sourced by the bundle tests, inside a private mount namespace (`unshare -m`): hides the system
# copies of everything a bundle was made from, so that a binary that still needs them fails to
# load, as on a GPU host without the Debian packages.
#   hide_system_copies BUNDLE WORK [REGEX]
# WORK: where an empty directory may be made; REGEX (grep -E): hide only the files whose path
# matches it (default: every file).
# Prints "N files, M directories"; calls `fail` (the caller's) when one cannot be hidden.

# The build-host paths the bundle's files and directories came from (its MANIFEST).
manifest_sources() { awk '$2 == "<-" { print $3 }' "$1/MANIFEST"; }

hide_system_copies() {
  local bundle=$1 work=$2 only=${3:-.} empty src n=0 d
  empty=$(mktemp -d "$work/empty.XXXXXX")
  local dirs=(/usr/share/openmpi /etc/openmpi)
  while IFS= read -r src; do
    if [ -d "$src" ]; then
      dirs+=("$src")
    elif [ -f "$src" ] && grep -Eq "$only" <<<"$src"; then
      mount --bind /dev/null "$src" || fail "cannot hide $src"
      n=$((n + 1))
    fi
  done < <(manifest_sources "$bundle")
  for d in "${dirs[@]}"; do [ ! -d "$d" ] || mount --bind "$empty" "$d" || fail "cannot hide $d"; done
  echo "$n files, ${#dirs[@]} directories"
}
