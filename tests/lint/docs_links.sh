#!/usr/bin/env bash
# Every document in the repository stands on its own: each relative link in a
# tracked Markdown file resolves to a tracked file or folder inside the
# repository, no text points at a briefing folder beside the checkout or under /work, and
# no text uses words a user of this project cannot resolve ("the seed" for the
# API it implements: name the `cuda_process_sharing` key or the `HostStatus`
# JSON instead). Fuzzing's own "seeds" (tests/fuzz/corpus) are not that word.
# Usage: docs_links.sh [REPO_ROOT]
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 2
# The tracked files in a git checkout; every file but build output elsewhere
# (a copy without .git, e.g. the Slurm 24.11 root's).
if git rev-parse --git-dir >/dev/null 2>&1; then
  files() { git ls-files "$@"; }
else
  files() {
    find . \( -name '.git' -o -name 'build*' -o -name '.gl' -o -name '.whl' \) -prune -o -type f -print | sed 's|^\./||' |
      if [ $# -gt 0 ]; then grep -E "$(printf '%s' "$1" | sed 's/\./\\./g; s/\*/.*/g')$"; else cat; fi
  }
fi
search() { # search ERE EXCLUDED_FILE: FILE:LINE:TEXT of every match in the files
  files | grep -vxF "$2" | tr '\n' '\0' | xargs -0 grep -nHE "$1" -- 2>/dev/null
}
fail=0 links=0 docs=0
while IFS= read -r md; do
  docs=$((docs + 1))
  dir=$(dirname "$md")
  # [text](target) with a relative target; anchors and web links skipped.
  while IFS= read -r target; do
    links=$((links + 1))
    path=${target%%#*}
    [ -z "$path" ] && continue
    case $path in /*) resolved=.$path ;; *) resolved=$dir/$path ;; esac
    real=$(realpath -m "$resolved")
    case $real in
      "$root"/*|"$root") ;;
      *) echo "$md: link '$target' leaves the repository"; fail=1; continue ;;
    esac
    [ -e "$real" ] || { echo "$md: link '$target' does not resolve (no $resolved)"; fail=1; }
  done < <(grep -oE '\]\([^)[:space:]]+\)' "$md" | sed -E 's/^\]\((.*)\)$/\1/' | grep -vE '^(https?:|mailto:|#)')
done < <(files '*.md')
if out=$(search '\.\./shared|/work/(shared|main)' tests/lint/docs_links.sh); then
  echo "$out" | sed 's/$/   <- points outside the repository/'; fail=1
fi
if out=$(search "[Tt][Hh][Ee] [Ss][Ee][Ee][Dd]\b|\b[Ss]eed's\b|\b[Ss]eed \`|\([Ss]eed\b" tests/lint/docs_links.sh); then
  echo "$out" | sed 's/$/   <- "seed": name the API instead/'; fail=1
fi
[ "$docs" -gt 0 ] && [ "$links" -gt 0 ] || { echo "docs_links: read $docs documents and $links links; the reader is broken" >&2; exit 2; }
echo "docs_links: $docs documents, $links relative links checked"
exit $fail
