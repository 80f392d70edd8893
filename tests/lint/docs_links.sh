#!/usr/bin/env bash
# Every document in the repository stands on its own: each relative link in a
# tracked Markdown file resolves to a tracked file or folder inside the
# repository, no text points at a briefing outside it (../shared, /work/), and
# no text uses words a user of this project cannot resolve ("the seed" for the
# API it implements: name the `cuda_process_sharing` key or the `HostStatus`
# JSON instead). Fuzzing's own "seeds" (tests/fuzz/corpus) are not that word.
# Usage: docs_links.sh [REPO_ROOT]
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 2
git rev-parse --git-dir >/dev/null 2>&1 || { echo "docs_links: $root is not a git checkout" >&2; exit 2; }
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
done < <(git ls-files '*.md')
if out=$(git grep -nE '\.\./shared|/work/(shared|main)' -- . ':!tests/lint/docs_links.sh'); then
  echo "$out" | sed 's/$/   <- points outside the repository/'; fail=1
fi
if out=$(git grep -niE "\bthe seed\b|\bseed's\b|\bseed \`|\(seed\b" -- . ':!tests/lint/docs_links.sh'); then
  echo "$out" | sed 's/$/   <- "seed": name the API instead/'; fail=1
fi
[ "$docs" -gt 0 ] && [ "$links" -gt 0 ] || { echo "docs_links: read $docs documents and $links links; the reader is broken" >&2; exit 2; }
echo "docs_links: $docs documents, $links relative links checked"
exit $fail
