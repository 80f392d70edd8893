#!/usr/bin/env bash
# The generated man page (BUILD_DIR/cli/unilab-mps.1) documents every command
# and global option `unilab-mps --help` lists, and renders without warnings.
# Usage: tests/integration/manpage_test.sh BUILD_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
build=${1:?usage: $0 BUILD_DIR}
MIN_CHECKS=31
cli=$build/cli/unilab-mps
man=$build/cli/unilab-mps.1
check "the man page was generated" test -s "$man"
help=$("$cli" --help)
commands=$(printf '%s\n' "$help" | sed -n '/^commands:/,/^$/p' | sed -n 's/^  \([a-z-]*\).*/\1/p')
check "--help lists commands" test -n "$commands"
# The documented commands (README.md): each must be listed, so a command
# dropped from the table cannot silently shrink this test.
for c in status doctor start stop env visible-devices probe; do
  check "--help lists '$c'" grep -qx -- "$c" <<<"$commands"
done
for c in $commands; do
  section=".SS $(printf '%s' "$c" | sed 's/-/\\-/g')"   # roff spells '-' as '\-'
  check "section for command '$c'" grep -qxF -- "$section" "$man"
  synopsis=$("$cli" "$c" --help | sed -n '1s/^usage: unilab-mps //p' | sed 's/-/\\-/g')
  # An empty synopsis would match any file: it must name the command.
  case $synopsis in
    "$(printf '%s' "$c" | sed 's/-/\\-/g')"*) check "synopsis of '$c' as in --help" grep -qF -- "$synopsis" "$man" ;;
    *) fail "synopsis of '$c' as in --help" "\`unilab-mps $c --help\` has no 'usage: unilab-mps $c ...' first line (got '$synopsis')" ;;
  esac
done
for opt in $(printf '%s\n' "$help" | sed -n '/^global options:/,/^$/p' | sed -n 's/^  \(--[a-z-]*\).*/\1/p'); do
  check "global option $opt" grep -qF -- "$(printf '%s' "$opt" | sed 's/-/\\-/g')" "$man"
done
check "exit status 4 documented" grep -qx '.B 4' "$man"
if command -v groff >/dev/null; then
  check "renders without groff warnings" bash -c "groff -man -ww -z '$man' 2>&1 | (! grep -q .)"
fi
finish
