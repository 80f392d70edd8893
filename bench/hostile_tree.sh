#!/usr/bin/env bash
# Issue #10 (a): what a user can leave in its daemon's pipe and log
# directories, and what the job epilog pays to remove it. As the job's user
# (nobody), builds in run_dir/job<ID>.<node>.gpu0 a DEPTH-level directory
# chain below pipe/ and FILES files in log/, with no record (the epilog finds
# the run-dir entry, proves no daemon runs there, and removes it); then runs
# the real unilab-mps-epilog as root and reports its wall time, the peak RSS
# of the epilog and of its removal child, and whether anything is left.
#
# Usage: bench/hostile_tree.sh BUILD_DIR [DEPTH] [FILES]   (root)
# env: BENCH_DIR (default /dev/shm when it is a tmpfs, else /tmp),
#      BENCH_OUT (default docs/bench-hostile-tree.txt; '-' for stdout only)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: $0 BUILD_DIR [DEPTH] [FILES]}" && pwd)
DEPTH=${2:-100000}
FILES=${3:-1000000}
OUT=${BENCH_OUT:-$here/../docs/bench-hostile-tree.txt}
[ "$(id -u)" -eq 0 ] || { echo "bench/hostile_tree.sh: run as root (the epilog removes a tree of another uid)" >&2; exit 1; }
base=${BENCH_DIR:-}
if [ -z "$base" ]; then
  if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; then base=/dev/shm; else base=/tmp; fi
fi
W=$(mktemp -d "$base/unilab-hostile.XXXXXX")
chmod 755 "$W"
trap 'rm -rf "$W" 2>/dev/null || true' EXIT
mkdir -m 755 "$W/state" "$W/run"
USER_UID=65534 USER_GID=65534
NAME=job4242.hn1.gpu0
mkdir -m 700 "$W/run/$NAME" "$W/run/$NAME/pipe" "$W/run/$NAME/log"
chown -R "$USER_UID:$USER_GID" "$W/run/$NAME"

python3 - "$W/run/$NAME" "$DEPTH" "$FILES" "$USER_UID" "$USER_GID" <<'PY'
import os, sys, time
top, depth, files, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
os.setgroups([]); os.setgid(gid); os.setuid(uid)   # built by the user, as a hostile job would
t = time.monotonic()
fd = os.open(top + "/pipe", os.O_RDONLY | os.O_DIRECTORY)
for _ in range(depth):
    os.mkdir("d", 0o700, dir_fd=fd)
    nfd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd); fd = nfd
os.close(fd)
fd = os.open(top + "/log", os.O_RDONLY | os.O_DIRECTORY)
for i in range(files):
    os.close(os.open("f%d" % i, os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
os.close(fd)
print("built in %.1f s" % (time.monotonic() - t), file=sys.stderr)
PY

result=$(python3 - "$build/prolog/unilab-mps-epilog" "$W" "$NAME" "$USER_UID" "$USER_GID" <<'PY'
import os, resource, subprocess, sys, time
epilog, w, name, uid, gid = sys.argv[1:6]
env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_UID": uid, "SLURM_JOB_GID": gid, "SLURMD_NODENAME": "hn1",
       "SLURM_CONF": w + "/slurm.conf", "SLURM_JOB_GPUS": "0"}
open(w + "/slurm.conf", "w").close()
args = [epilog, "state_dir=" + w + "/state", "run_dir=" + w + "/run", "nvidia_smi=/bin/true", "mps_control=/bin/true"]
t = time.monotonic()
p = subprocess.run(args, env=env, capture_output=True, text=True)
took = time.monotonic() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
left = os.path.exists(w + "/run/" + name)
print("rc=%d wall_s=%.2f peak_rss_kib=%d left=%s" % (p.returncode, took, ru.ru_maxrss, "yes" if left else "no"))
for line in (p.stdout + p.stderr).splitlines()[:5]:
    print("  epilog: " + line)
PY
)
fs=$(stat -f -c %T "$W")
report=$(cat <<TXT
# bench/hostile_tree.sh: the job epilog removing a hostile pipe/log tree
# (issue #10 a). Built as uid $USER_UID: a $DEPTH-level chain under pipe/,
# $FILES files under log/, no record; then unilab-mps-epilog as root.
# peak_rss_kib: the largest of the epilog and its removal child (RUSAGE_CHILDREN).
date=$(date -u +%Y-%m-%dT%H:%M:%SZ) commit=$(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo unknown) fs=$fs kernel=$(uname -r) cpus=$(nproc)
depth=$DEPTH files=$FILES $result
TXT
)
echo "$report"
if [ "$OUT" != - ]; then echo "$report" >"$OUT"; fi
case $result in rc=0*left=no*) exit 0 ;; *) exit 1 ;; esac
