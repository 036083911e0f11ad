#!/usr/bin/env bash
# Checks that every C++ file of the tree follows the repo's .clang-format (Debian's
# clang-format 14); with --fix, formats them in place.
#
#   scripts/check_format.sh [--fix]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
formatter=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$formatter" ]; then
  echo "check_format: clang-format is not installed (Debian: clang-format)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files 'src/*.cc' 'src/*.h' 'include/*.h' 'tests/cpp/*.cc' 'tests/cpp/*.h' \
                                  'tests/fuzz/*.cc' 'tests/cpp_consumer/*.cc' 'tools/*.cc' 'tests/power_loss/*.c')
if [[ "${1:-}" == --fix ]]; then
  "$formatter" -i --style=file "${files[@]}"
  exit 0
fi
"$formatter" --dry-run -Werror --style=file "${files[@]}" 2> /tmp/check_format.$$ || {
  grep -E '^[^ ]+:[0-9]+:[0-9]+: (error|warning)' /tmp/check_format.$$ | cut -d: -f1 | sort -u | sed 's/^/  not formatted: /' >&2
  rm -f /tmp/check_format.$$
  echo "check_format: run scripts/check_format.sh --fix" >&2
  exit 1
}
rm -f /tmp/check_format.$$
echo "check_format: ${#files[@]} C++ files follow .clang-format"
