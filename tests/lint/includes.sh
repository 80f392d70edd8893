#!/usr/bin/env bash
# Fails when a C or C++ file includes the same header twice (a duplicate is
# dead text that hides which header a file really needs).
# Usage: tests/lint/includes.sh REPO_DIR
set -uo pipefail
cd "${1:?usage: $0 REPO_DIR}" || exit 2
# A git checkout's files; a copy without .git (the Slurm roots'): the tree
# without build dirs.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.c')
else
  mapfile -t files < <(find . -path './build*' -prune -o -type f \( -name '*.[ch]pp' -o -name '*.[ch]' \) -print | sort)
fi
[ "${#files[@]}" -gt 0 ] || { echo "lint includes: no source files found" >&2; exit 2; }
dups=$(awk '/^[ \t]*#[ \t]*include/ { k = FILENAME SUBSEP $2
         if (k in seen) print FILENAME ":" FNR ": " $2 " is included again (first at line " seen[k] "); remove this line"
         else seen[k] = FNR }' "${files[@]}")
if [ -n "$dups" ]; then
  printf '%s\n' "$dups"
  echo "lint includes: $(printf '%s\n' "$dups" | wc -l) duplicate #include lines in ${#files[@]} files"
  exit 1
fi
echo "lint includes: ${#files[@]} files, no header included twice"
