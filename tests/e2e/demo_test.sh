#!/usr/bin/env bash
# The README's first command as a test: runs scripts/demo as a new user
# would and checks what it printed (two tasks, each with a GPU UUID and a
# daemon of its own running as the job's user, root seeing both daemons,
# nothing left afterwards), then once more with a run_dir too long for the
# daemons' sockets, which must fail naming the longest run_dir that fits.
# Needs root (the demo starts a local Slurm cluster). About 25 s after a build.
#
# Usage: tests/e2e/demo_test.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
top=$(cd "$here/../.." && pwd)
MIN_CHECKS=19
out=$(mktemp /tmp/unilab-demo-test.XXXXXX)
trap 'rm -f "$out"' EXIT

echo "== scripts/demo"
"$top/scripts/demo" >"$out" 2>&1
rc=$?
sed 's/^/   | /' "$out"
expect_eq "the demo exits 0" 0 "$rc"
expect_contains "the demo says it passed its own checks" "$(cat "$out")" "scripts/demo: ok"
for t in 0 1; do
  task=$(sed -n "/^ *task $t on n1 as unimps1\$/,/connected to MPS server/p" "$out")
  check "task $t ran as unimps1 on n1" test -n "$task"
  check "task $t: CUDA_VISIBLE_DEVICES is one GPU UUID" grep -Eq '^ *CUDA_VISIBLE_DEVICES=GPU-[0-9a-f-]{36}$' <<<"$task"
  check "task $t: its daemon runs as unimps1" grep -Eq '^ *daemon pid [0-9]+ runs as unimps1$' <<<"$task"
  check "task $t: its client reached an MPS server" grep -Eq '^ *client [0-9]+ connected to MPS server [0-9]+$' <<<"$task"
done
uuids=$(sed -n 's/^ *CUDA_VISIBLE_DEVICES=//p' "$out" | sort -u | wc -l)
expect_eq "the two tasks saw two different GPUs" 2 "$uuids"
pipes=$(sed -n 's/^ *CUDA_MPS_PIPE_DIRECTORY=//p' "$out" | sort -u | wc -l)
expect_eq "the two tasks reached two different daemons" 2 "$pipes"
live=$(grep -Ec '^ +job[0-9]+\.n1\.gpu[0-9]+ +pid [0-9]+ +live ' "$out")
expect_eq "root's status --job listed both daemons live" 2 "$live"
for what in "records left" "pipe/log dirs left" "daemon processes"; do
  expect_eq "afterwards: $what 0" 0 "$(sed -n "s|^ *$what: *||p" "$out")"
done

echo "== scripts/demo --run-dir <65 characters>: too long for the daemons' sockets"
long=/tmp/$(printf 'r%.0s' $(seq 1 60))
"$top/scripts/demo" --run-dir "$long" >"$out" 2>&1
rc=$?
sed 's/^/   | /' "$out" | tail -n 15
expect_eq "the demo fails (exit 1)" 1 "$rc"
expect_contains "the plugin's refusal names the longest run_dir that fits" "$(cat "$out")" \
  "run_dir=$long is too long (65 characters)"
expect_contains "... and the bound" "$(cat "$out")" "give a run_dir of at most 64 characters"
finish
