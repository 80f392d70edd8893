#!/usr/bin/env bash
# The core's two parts stay apart: common/mps/ (what any MPS user needs)
# includes nothing from common/slurm/ (Slurm's job logic) nor from the front
# ends; common/ as a whole includes nothing from spank/, prolog/ or cli/.
# Usage: layers.sh [REPO_ROOT]
set -uo pipefail
cd "${1:-$(dirname "$0")/../..}" || exit 2
n=$(ls common/mps/*.[ch]pp common/slurm/*.[ch]pp 2>/dev/null | wc -l)
[ "$n" -gt 0 ] || { echo "layers: no sources under common/mps and common/slurm; the layout changed" >&2; exit 2; }
fail=0
if out=$(grep -nE '#include "(common/slurm|spank|prolog|cli)/' common/mps/*.[ch]pp); then
  echo "$out" | sed 's/$/   <- common\/mps must not depend on Slurm code or a front end/'; fail=1
fi
if out=$(grep -nE '#include "(spank|prolog|cli)/' common/slurm/*.[ch]pp); then
  echo "$out" | sed 's/$/   <- common must not depend on a front end/'; fail=1
fi
if out=$(ls common/*.[ch]pp 2>/dev/null); then
  echo "$out" | sed 's/$/   <- put it in common\/mps or common\/slurm/'; fail=1
fi
echo "layers: $n sources checked"
exit $fail
