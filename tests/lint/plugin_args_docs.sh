#!/usr/bin/env bash
# README.md and docs/ADMIN.md carry the plugin-argument table that the
# parser itself is made of (common/slurm/slurm_config.cpp): each between
# the two marker lines below, exactly as tests/tools/plugin_args_table
# prints it. Fails when a document drifts; --write rewrites both.
# Usage: tests/lint/plugin_args_docs.sh BUILD_DIR REPO_DIR [--write]
set -uo pipefail
build=${1:?usage: $0 BUILD_DIR REPO_DIR [--write]}
repo=${2:?usage: $0 BUILD_DIR REPO_DIR [--write]}
write=${3:-}
tool=$build/tests/tools/plugin_args_table
begin='<!-- plugin arguments: generated from common/slurm/slurm_config.cpp by tests/lint/plugin_args_docs.sh --write -->'
end='<!-- end of plugin arguments -->'
[ -x "$tool" ] || { echo "lint plugin_args_docs: $tool is not built" >&2; exit 2; }
rc=0
for pair in README.md:brief docs/ADMIN.md:full; do
  doc=$repo/${pair%%:*} words=${pair##*:}
  want=$("$tool" "$words") || { echo "lint plugin_args_docs: $tool $words failed" >&2; exit 2; }
  n=$(grep -cxF -- "$begin" "$doc"); m=$(grep -cxF -- "$end" "$doc")
  if [ "$n" != 1 ] || [ "$m" != 1 ]; then
    echo "${pair%%:*}: needs the begin and end marker lines once each (found $n and $m):"
    echo "  $begin"; echo "  $end"
    rc=1; continue
  fi
  have=$(awk -v b="$begin" -v e="$end" '$0 == e { on = 0 } on { print } $0 == b { on = 1 }' "$doc")
  rows=$(printf '%s\n' "$want" | grep -c '^| `')
  if [ "$have" = "$want" ]; then
    echo "${pair%%:*}: the plugin-argument table matches the parser's ($rows keys)"
  elif [ "$write" = --write ]; then
    awk -v b="$begin" -v e="$end" -v f=<(printf '%s\n' "$want") '
      $0 == e { while ((getline l < f) > 0) print l; on = 0 }
      !on { print } $0 == b { on = 1 }' "$doc" >"$doc.new" && mv "$doc.new" "$doc"
    echo "${pair%%:*}: rewrote the plugin-argument table ($rows keys)"
  else
    echo "${pair%%:*}: the plugin-argument table differs from the parser's; run $0 $build $repo --write"
    diff <(printf '%s\n' "$have") <(printf '%s\n' "$want") | sed 's/^/  /'
    rc=1
  fi
done
exit $rc
