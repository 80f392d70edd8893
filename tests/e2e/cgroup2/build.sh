#!/usr/bin/env bash
# Builds the test-only /proc/<pid>/cgroup shim (proc_cgroup_v2_shim.c: what it
# works around and what differs on a real cgroup-v2-only host) into DIR and
# prints the path of the .so. Usage: tests/e2e/cgroup2/build.sh DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: $0 DIR}/proc_cgroup_v2_shim.so
cc -shared -fPIC -O2 -Wall -Wextra -Werror -o "$out" "$here/proc_cgroup_v2_shim.c" -ldl
chmod 755 "$out"
printf '%s\n' "$out"
