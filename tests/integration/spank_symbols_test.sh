#!/usr/bin/env bash
# Every slurm_spank_* symbol the plugin exports is a callback the installed
# slurm/spank.h declares (a misspelt callback is never called: 22.05-26.05's
# plugstack looks symbols up by name), and the callbacks the plugin relies
# on are there. Usage: spank_symbols_test.sh PLUGIN_SO SPANK_H
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
plugin=${1:?usage: $0 PLUGIN_SO SPANK_H}
header=${2:?usage: $0 PLUGIN_SO SPANK_H}
MIN_CHECKS=6

declared=$(grep -o 'slurm_spank_[a-z_]*' "$header" | sort -u)
exported=$(nm -D --defined-only "$plugin" | awk '$3 ~ /^slurm_spank_/ {print $3}' | sort -u)
check "the plugin exports slurm_spank_* symbols" test -n "$exported"
for sym in $exported; do
  check "exported $sym is declared by $header" grep -qx "$sym" <<<"$declared"
done
for sym in slurm_spank_init slurm_spank_task_init_privileged slurm_spank_task_init slurm_spank_job_prolog slurm_spank_job_epilog; do
  check "the plugin exports $sym" grep -qx "$sym" <<<"$exported"
done
finish
