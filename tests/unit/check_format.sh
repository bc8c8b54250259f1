#!/usr/bin/env bash
# Every C++/CUDA source under src/, tests/ and bench/ is formatted by the repository's
# .clang-format. Prints the files that are not and exits 1; skips (77) without clang-format 14,
# the version Debian 12 ships, since other versions format some constructs differently.
set -u
root=${1:?usage: check_format.sh REPOSITORY_ROOT}
command -v clang-format >/dev/null || { echo "SKIP: no clang-format"; exit 77; }
version=$(clang-format --version | grep -o 'version [0-9]*' | grep -o '[0-9]*')
[ "$version" = 14 ] || { echo "SKIP: clang-format $version, the check is for version 14"; exit 77; }
bad=()
while IFS= read -r -d '' f; do
  clang-format --dry-run --Werror --style=file "$f" >/dev/null 2>&1 || bad+=("${f#"$root"/}")
done < <(find "$root/src" "$root/tests" "$root/bench" -type f \
  \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print0)
if [ ${#bad[@]} -gt 0 ]; then
  printf 'not clang-formatted (run clang-format -i on them):\n'
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "every source is clang-formatted"
